package main

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// Op is one admin call: create | topics | queues | groups | delete.
type Op struct {
	Op         string `json:"op"`
	Topic      string `json:"topic"`
	BrokerAddr string `json:"brokerAddr"`
	Queues     int    `json:"queues"`
	Perm       int    `json:"perm"`
}

// adminOps runs the admin client's calls in order, one line each ({"op", "error"} or its answer).
func adminOps(opt Options) {
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{opt.NameSrv})))
	if err != nil {
		fatal(err)
	}
	for _, op := range opt.Ops {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res := map[string]interface{}{"op": op.Op}
		switch op.Op {
		case "create":
			opts := []admin.OptionCreate{admin.WithTopicCreate(op.Topic), admin.WithBrokerAddrCreate(op.BrokerAddr)}
			if op.Queues > 0 {
				opts = append(opts, admin.WithReadQueueNums(op.Queues), admin.WithWriteQueueNums(op.Queues))
			}
			if op.Perm > 0 {
				opts = append(opts, admin.WithPerm(op.Perm))
			}
			err = a.CreateTopic(ctx, opts...)
		case "topics":
			var l *admin.TopicList
			if l, err = a.FetchAllTopicList(ctx); err == nil {
				res["topics"] = l.TopicList
			}
		case "queues":
			var mqs []*primitive.MessageQueue
			if mqs, err = a.FetchPublishMessageQueues(ctx, op.Topic); err == nil {
				qs := []map[string]interface{}{}
				for _, mq := range mqs {
					qs = append(qs, map[string]interface{}{"topic": mq.Topic, "brokerName": mq.BrokerName, "queueId": mq.QueueId})
				}
				res["queues"] = qs
			}
		case "groups":
			var w *admin.SubscriptionGroupWrapper
			if w, err = a.GetAllSubscriptionGroup(ctx, op.BrokerAddr, 5*time.Second); err == nil {
				res["groups"] = w.SubscriptionGroupTable
				res["dataVersion"] = w.DataVersion
			}
		case "delete":
			opts := []admin.OptionDelete{admin.WithTopicDelete(op.Topic)}
			if op.BrokerAddr != "" {
				opts = append(opts, admin.WithBrokerAddrDelete(op.BrokerAddr), admin.WithNameSrvAddr([]string{opt.NameSrv}))
			}
			err = a.DeleteTopic(ctx, opts...)
		default:
			err = fmt.Errorf("unknown op %q", op.Op)
		}
		cancel()
		if err != nil {
			res["error"] = err.Error()
		}
		out(res)
	}
	a.Close()
	out(map[string]bool{"done": true})
}
