// rmqgo drives the real Go remoting client (github.com/apache/rocketmq-client-go/v2), unmodified,
// for tests/test_go_client.py. One scenario per run, its options one JSON argument:
//
//	rmqgo produce '<json>'      one JSON line per send result (or {"error"}), then {"done":true}
//	rmqgo transaction '<json>'  one line per transactional send and per check-back, then {"done":true}
//	rmqgo consume '<json>'      {"ready":true}, one line per delivery until stdin closes (or
//	                            maxSeconds pass); then Shutdown (commits offsets) and {"closed":true}
//	rmqgo pull '<json>'         the messages of one queue read with the pull consumer, then {"done":true}
//	rmqgo admin '<json>'        one line per admin call (create, topics, queues, groups, delete), then {"done":true}
//
// Every scenario ends on its own within its options' bounds: the client's goroutines never keep
// the process alive past them.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// Options of every scenario; each reads the fields it needs.
type Options struct {
	NameSrv  string `json:"nameSrv"`
	Group    string `json:"group"`
	Topic    string `json:"topic"`
	Instance string `json:"instanceName"`
	// namespace: the client's WithNamespace (topics and groups become <namespace>%<name> on the wire)
	Namespace string `json:"namespace"`
	// trace: send message traces to RMQ_SYS_TRACE_TOPIC (the client's WithTrace)
	Trace bool `json:"trace"`
	// ACL: sign every request with these (primitive.Credentials)
	AccessKey string `json:"accessKey"`
	SecretKey string `json:"secretKey"`
	// produce: sync | async | oneway | batch | orderly (a hash queue selector on the sharding key)
	Mode     string `json:"mode"`
	Messages []Msg  `json:"messages"`
	// consume
	Expression        string `json:"expression"`
	ExpressionType    string `json:"expressionType"` // TAG (the default) or SQL92
	Fail              string `json:"fail"`           // "always" | "once": ConsumeRetryLater on those deliveries
	MaxReconsumeTimes int32  `json:"maxReconsumeTimes"`
	Orderly           bool   `json:"orderly"`
	Broadcasting      bool   `json:"broadcasting"` // BroadCasting instead of Clustering (offsets kept in $HOME)
	MaxSeconds        int    `json:"maxSeconds"`
	FromFirst         bool   `json:"fromFirst"`
	// pull
	BrokerName string `json:"brokerName"`
	QueueID    int    `json:"queueId"`
	Offset     int64  `json:"offset"`
	Max        int    `json:"max"`
	// admin: the calls to make, in order
	Ops []Op `json:"ops"`
	// consume: ConsumeFromTimestamp at this time (yyyyMMddHHmmss) for a group without offsets
	ConsumeTimestamp string `json:"consumeTimestamp"`
	// transaction: how long to wait for the broker's check-backs of the UNKNOW ones (0: 30 s;
	// negative: not at all, the producer leaves them undecided)
	CheckSeconds int `json:"checkSeconds"`
}

// Msg is one message to send.
type Msg struct {
	Tags        string            `json:"tags"`
	Keys        []string          `json:"keys"`
	Props       map[string]string `json:"props"`
	Body        string            `json:"body"`
	Size        int               `json:"size"` // a body of Size bytes of 'x' instead of Body
	ShardingKey string            `json:"shardingKey"`
	DelayLevel  int               `json:"delayLevel"`
	Local       string            `json:"local"` // transaction: commit | rollback | unknown
	Check       string            `json:"check"` // transaction: the answer to a check-back
	// transaction: not sent, only its check-back answered (one sent by an earlier producer of the group)
	CheckOnly bool `json:"checkOnly"`
}

func out(v interface{}) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(append(b, '\n'))
}

func fatal(err error) {
	out(map[string]string{"fatal": err.Error()})
	os.Exit(1)
}

func (o Options) credentials() primitive.Credentials {
	return primitive.Credentials{AccessKey: o.AccessKey, SecretKey: o.SecretKey}
}

func (o Options) traceConfig() *primitive.TraceConfig {
	return &primitive.TraceConfig{GroupName: o.Group, NamesrvAddrs: []string{o.NameSrv}, Access: primitive.Local,
		Credentials: o.credentials()}
}

func (m Msg) message(topic string) *primitive.Message {
	body := []byte(m.Body)
	if m.Size > 0 {
		body = make([]byte, m.Size)
		for i := range body {
			body[i] = 'x'
		}
	}
	msg := primitive.NewMessage(topic, body)
	if m.Tags != "" {
		msg.WithTag(m.Tags)
	}
	if len(m.Keys) > 0 {
		msg.WithKeys(m.Keys)
	}
	if m.ShardingKey != "" {
		msg.WithShardingKey(m.ShardingKey)
	}
	if m.DelayLevel > 0 {
		msg.WithDelayTimeLevel(m.DelayLevel)
	}
	for k, v := range m.Props {
		msg.WithProperty(k, v)
	}
	return msg
}

func sendResult(r *primitive.SendResult, err error) map[string]interface{} {
	if err != nil {
		return map[string]interface{}{"error": err.Error()}
	}
	res := map[string]interface{}{
		"status": int(r.Status), "msgId": r.MsgID, "offsetMsgId": r.OffsetMsgID,
		"queueOffset": r.QueueOffset, "transactionId": r.TransactionID, "regionId": r.RegionID,
	}
	if r.MessageQueue != nil {
		res["queueId"] = r.MessageQueue.QueueId
		res["brokerName"] = r.MessageQueue.BrokerName
		res["topic"] = r.MessageQueue.Topic
	}
	return res
}

func delivery(m *primitive.MessageExt) map[string]interface{} {
	body := interface{}(string(m.Body))
	allX := true
	for _, b := range m.Body {
		allX = allX && b == 'x'
	}
	if len(m.Body) > 256 {
		body = nil
	}
	return map[string]interface{}{
		"topic": m.Topic, "tags": m.GetTags(), "keys": m.GetKeys(), "props": m.GetProperties(),
		"body": body, "size": len(m.Body), "bodyIsX": len(m.Body) > 256 && allX,
		"msgId": m.MsgId, "offsetMsgId": m.OffsetMsgId, "queueId": m.Queue.QueueId,
		"brokerName": m.Queue.BrokerName, "queueOffset": m.QueueOffset,
		"reconsumeTimes": m.ReconsumeTimes, "commitLogOffset": m.CommitLogOffset,
		"storeSize": m.StoreSize, "bornHost": m.BornHost, "storeHost": m.StoreHost,
		"bornTimestamp": m.BornTimestamp, "storeTimestamp": m.StoreTimestamp, "sysFlag": m.SysFlag,
	}
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: rmqgo produce|transaction|consume|pull '<json options>'")
		os.Exit(2)
	}
	// the client logs to stderr; RMQGO_LOG=info (say) to see more of it while debugging
	level := os.Getenv("RMQGO_LOG")
	if level == "" {
		level = "error"
	}
	rlog.SetLogLevel(level)
	var opt Options
	if err := json.Unmarshal([]byte(os.Args[2]), &opt); err != nil {
		fmt.Fprintln(os.Stderr, "bad options:", err)
		os.Exit(2)
	}
	if opt.Instance == "" {
		opt.Instance = fmt.Sprintf("go-%d", os.Getpid())
	}
	if opt.MaxSeconds <= 0 {
		opt.MaxSeconds = 120
	}
	// a scenario that hangs in the client ends here rather than holding a test to its timeout
	time.AfterFunc(time.Duration(opt.MaxSeconds+30)*time.Second, func() {
		out(map[string]string{"fatal": "scenario did not end in time"})
		os.Exit(3)
	})
	switch os.Args[1] {
	case "produce":
		produce(opt)
	case "transaction":
		transaction(opt)
	case "consume":
		consume(opt)
	case "pull":
		pull(opt)
	case "admin":
		adminOps(opt)
	default:
		fmt.Fprintln(os.Stderr, "unknown scenario", os.Args[1])
		os.Exit(2)
	}
	os.Exit(0)
}
