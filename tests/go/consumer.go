package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

func consume(opt Options) {
	from := consumer.ConsumeFromLastOffset
	if opt.FromFirst {
		from = consumer.ConsumeFromFirstOffset
	}
	if opt.ConsumeTimestamp != "" {
		from = consumer.ConsumeFromTimestamp
	}
	model := consumer.Clustering
	if opt.Broadcasting {
		model = consumer.BroadCasting
	}
	opts := []consumer.Option{
		consumer.WithNameServer(primitive.NamesrvAddr{opt.NameSrv}),
		consumer.WithGroupName(opt.Group),
		consumer.WithInstance(opt.Instance),
		consumer.WithConsumerModel(model),
		consumer.WithConsumeFromWhere(from),
		consumer.WithConsumerOrder(opt.Orderly),
	}
	if opt.AccessKey != "" {
		opts = append(opts, consumer.WithCredentials(opt.credentials()))
	}
	if opt.Namespace != "" {
		opts = append(opts, consumer.WithNamespace(opt.Namespace))
	}
	if opt.Trace {
		opts = append(opts, consumer.WithTrace(opt.traceConfig()))
	}
	if opt.ConsumeTimestamp != "" {
		opts = append(opts, consumer.WithConsumeTimestamp(opt.ConsumeTimestamp))
	}
	if opt.MaxReconsumeTimes > 0 {
		opts = append(opts, consumer.WithMaxReconsumeTimes(opt.MaxReconsumeTimes))
	}
	c, err := consumer.NewPushConsumer(opts...)
	if err != nil {
		fatal(err)
	}
	expression := opt.Expression
	if expression == "" {
		expression = "*"
	}
	var mu sync.Mutex // one line at a time: deliveries come on several goroutines
	// per queue, the offset after the last message the listener took (ConsumeSuccess): Shutdown
	// waits for the client's offsets to reach them (see below)
	taken := map[primitive.MessageQueue]int64{}
	selector := consumer.MessageSelector{Type: consumer.TAG, Expression: expression}
	if opt.ExpressionType != "" {
		selector.Type = consumer.ExpressionType(opt.ExpressionType)
	}
	err = c.Subscribe(opt.Topic, selector,
		func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			result := consumer.ConsumeSuccess
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				failing := opt.Fail == "always" || (opt.Fail == "once" && m.ReconsumeTimes == 0)
				d := delivery(m)
				d["failing"] = failing
				out(d)
				if failing {
					result = consumer.ConsumeRetryLater
				}
			}
			if result == consumer.ConsumeSuccess {
				for _, m := range msgs {
					if m.Queue != nil && m.QueueOffset+1 > taken[*m.Queue] {
						taken[*m.Queue] = m.QueueOffset + 1
					}
				}
			}
			if result == consumer.ConsumeRetryLater && opt.Orderly {
				return consumer.SuspendCurrentQueueAMoment, nil
			}
			return result, nil
		})
	if err != nil {
		fatal(err)
	}
	if err := c.Start(); err != nil {
		fatal(err)
	}
	out(map[string]bool{"ready": true})
	stdinClosed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	// The client sends its offsets to the broker (one-way UPDATE_CONSUMER_OFFSET) every 5 s on its
	// own; here every 100 ms, so that a test sees them reach the broker while every connection is
	// open and read. The ones Shutdown sends may not arrive: it closes its connections right after
	// writing them, with answers unread, so the close resets the connection, and a broker that had
	// not read them yet gets the first and loses the rest (a plain socket server read 100 of 400
	// bytes written so, then ECONNRESET; 2 of 4 offsets arrived in this test on a loaded machine).
	tick := time.NewTicker(100 * time.Millisecond)
	quit := time.After(time.Duration(opt.MaxSeconds) * time.Second)
wait:
	for {
		select {
		case <-stdinClosed:
			break wait
		case <-quit:
			break wait
		case <-tick.C:
			if err := c.PersistConsumerOffset(); err != nil { // the client logs it too; the next tick retries
				fmt.Fprintln(os.Stderr, "persist:", err)
			}
		}
	}
	tick.Stop()
	// The client moves a queue's offset just after the listener returns, on the listener's
	// goroutine, and Shutdown persists the offsets it holds then: wait until they cover every
	// message taken (the client's own per-queue view, read under its locks; bounded, as a queue
	// whose message went back to the broker may not move at once). A fixed 200 ms here was too
	// short once on a loaded CI machine: a committed offset stayed behind.
	// (internal.ConsumerRunningInfo cannot be named outside the client's module: not named here)
	covered := func() bool {
		info := c.GetConsumerRunningInfo(false)
		mu.Lock()
		defer mu.Unlock()
		for mq, end := range taken {
			if pq, ok := info.MQTable[mq]; ok && pq.CommitOffset < end {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !covered() {
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock() // no delivery line half written while shutting down
	err = c.Shutdown()
	mu.Unlock()
	if err != nil {
		fatal(err)
	}
	// the one-way offset requests are written; a moment lets the broker read them before the
	// process exits and its sockets close
	time.Sleep(200 * time.Millisecond)
	out(map[string]bool{"closed": true})
}

// pull reads one queue from an offset with the pull consumer (the dead letter queue, say).
func pull(opt Options) {
	c, err := consumer.NewPullConsumer(
		consumer.WithNameServer(primitive.NamesrvAddr{opt.NameSrv}),
		consumer.WithGroupName(opt.Group),
		consumer.WithInstance(opt.Instance),
	)
	if err != nil {
		fatal(err)
	}
	if err := c.Subscribe(opt.Topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}); err != nil {
		fatal(err)
	}
	if err := c.Start(); err != nil {
		fatal(err)
	}
	max := opt.Max
	if max <= 0 {
		max = 32
	}
	brokerName := opt.BrokerName
	if brokerName == "" {
		brokerName = "broker-a"
	}
	r, err := c.PullFrom(context.Background(), &primitive.MessageQueue{Topic: opt.Topic, BrokerName: brokerName,
		QueueId: opt.QueueID}, opt.Offset, max)
	if err != nil {
		fatal(err)
	}
	out(map[string]interface{}{"status": int(r.Status), "nextBeginOffset": r.NextBeginOffset,
		"minOffset": r.MinOffset, "maxOffset": r.MaxOffset})
	for _, m := range r.GetMessageExts() {
		out(delivery(m))
	}
	c.Shutdown()
	out(map[string]bool{"done": true})
}
