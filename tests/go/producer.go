package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

func producerOptions(opt Options) []producer.Option {
	opts := []producer.Option{
		producer.WithNameServer(primitive.NamesrvAddr{opt.NameSrv}),
		producer.WithGroupName(opt.Group),
		producer.WithInstanceName(opt.Instance),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(10 * time.Second),
	}
	if opt.AccessKey != "" {
		opts = append(opts, producer.WithCredentials(opt.credentials()))
	}
	if opt.Namespace != "" {
		opts = append(opts, producer.WithNamespace(opt.Namespace))
	}
	if opt.Trace {
		opts = append(opts, producer.WithTrace(opt.traceConfig()))
	}
	if opt.Mode == "orderly" {
		// the same sharding key always hashes to the same queue of the topic
		opts = append(opts, producer.WithQueueSelector(producer.NewHashQueueSelector()))
	}
	return opts
}

func produce(opt Options) {
	p, err := producer.NewDefaultProducer(producerOptions(opt)...)
	if err != nil {
		fatal(err)
	}
	if err := p.Start(); err != nil {
		fatal(err)
	}
	ctx := context.Background()
	msgs := make([]*primitive.Message, len(opt.Messages))
	for i, m := range opt.Messages {
		msgs[i] = m.message(opt.Topic)
	}
	switch opt.Mode {
	case "", "sync", "orderly":
		for _, msg := range msgs {
			out(sendResult(p.SendSync(ctx, msg)))
		}
	case "batch": // one SEND_BATCH_MESSAGE of them all
		out(sendResult(p.SendSync(ctx, msgs...)))
	case "oneway":
		for _, msg := range msgs {
			if err := p.SendOneWay(ctx, msg); err != nil {
				out(map[string]string{"error": err.Error()})
			} else {
				out(map[string]bool{"sent": true})
			}
		}
		// One-way frames written just before Shutdown can be lost: it closes with answers unread,
		// which resets the connection, and a broker that had not read them yet loses them (see
		// consumer.go). A send answered on the same connection (this broker's) comes after them,
		// so its answer says the broker has read them.
		fence := primitive.NewMessage(opt.Topic+"Fence", []byte("fence"))
		if _, err := p.SendSync(ctx, fence); err != nil {
			fatal(err)
		}
	case "async": // all in flight at once; results printed in the order of the messages
		results := make([]map[string]interface{}, len(msgs))
		var wg sync.WaitGroup
		for i, msg := range msgs {
			i := i
			wg.Add(1)
			err := p.SendAsync(ctx, func(_ context.Context, r *primitive.SendResult, err error) {
				results[i] = sendResult(r, err)
				wg.Done()
			}, msg)
			if err != nil {
				results[i] = map[string]interface{}{"error": err.Error()}
				wg.Done()
			}
		}
		wg.Wait()
		for _, r := range results {
			out(r)
		}
	default:
		fatal(fmt.Errorf("unknown mode %q", opt.Mode))
	}
	if err := p.Shutdown(); err != nil {
		fatal(err)
	}
	out(map[string]bool{"done": true})
}

var states = map[string]primitive.LocalTransactionState{
	"commit": primitive.CommitMessageState, "rollback": primitive.RollbackMessageState, "unknown": primitive.UnknowState,
}

// txListener answers each message's Local state when it is sent and its Check state when the
// broker checks back, and reports every check-back.
type txListener struct {
	byBody  map[string]Msg
	mu      sync.Mutex
	pending map[string]bool // bodies whose check-back has not come yet
	checked chan struct{}
}

func (l *txListener) ExecuteLocalTransaction(msg *primitive.Message) primitive.LocalTransactionState {
	return states[l.byBody[string(msg.Body)].Local]
}

func (l *txListener) CheckLocalTransaction(msg *primitive.MessageExt) primitive.LocalTransactionState {
	body := string(msg.Body)
	answer := l.byBody[body].Check
	if answer == "" {
		answer = "unknown"
	}
	out(map[string]interface{}{
		"check": body, "answer": answer, "msgId": msg.MsgId, "topic": msg.Topic, "tags": msg.GetTags(),
		"keys": msg.GetKeys(), "props": msg.GetProperties(), "transactionId": msg.TransactionId,
		"queueOffset": msg.QueueOffset, "commitLogOffset": msg.CommitLogOffset,
	})
	l.mu.Lock()
	if l.pending[body] && answer != "unknown" {
		delete(l.pending, body)
		if len(l.pending) == 0 {
			close(l.checked)
		}
	}
	l.mu.Unlock()
	return states[answer]
}

func transaction(opt Options) {
	l := &txListener{byBody: map[string]Msg{}, pending: map[string]bool{}, checked: make(chan struct{})}
	for _, m := range opt.Messages {
		l.byBody[m.Body] = m
		if m.Local == "unknown" || m.CheckOnly {
			l.pending[m.Body] = true
		}
	}
	if len(l.pending) == 0 {
		close(l.checked)
	}
	p, err := producer.NewTransactionProducer(l, producerOptions(opt)...)
	if err != nil {
		fatal(err)
	}
	if err := p.Start(); err != nil {
		fatal(err)
	}
	for _, m := range opt.Messages {
		if m.CheckOnly {
			continue
		}
		r, err := p.SendMessageInTransaction(context.Background(), m.message(opt.Topic))
		if err != nil {
			out(map[string]interface{}{"error": err.Error()})
			continue
		}
		res := sendResult(r.SendResult, nil)
		res["state"] = map[primitive.LocalTransactionState]string{
			primitive.CommitMessageState: "commit", primitive.RollbackMessageState: "rollback",
			primitive.UnknowState: "unknown"}[r.State]
		out(res)
	}
	// the producer stays up until the broker has checked every UNKNOW one back, unless told to
	// leave them undecided (checkSeconds < 0: a later producer of the group answers for them)
	if opt.CheckSeconds >= 0 {
		wait := opt.CheckSeconds
		if wait == 0 {
			wait = 30
		}
		select {
		case <-l.checked:
			// give the one-way END_TRANSACTION of the last check-back time to leave
			time.Sleep(500 * time.Millisecond)
		case <-time.After(time.Duration(wait) * time.Second):
			out(map[string]string{"timeout": "check-backs missing"})
		}
	}
	if err := p.Shutdown(); err != nil {
		fatal(err)
	}
	out(map[string]bool{"done": true})
}
