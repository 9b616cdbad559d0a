package main

import "github.com/twmb/franz-go/pkg/kerr"

// partWait is one partition's part of a request that waits for one of the
// partition's watermarks to reach an offset: a DelayedProduce's (the high
// watermark) or a DelayedDeleteRecords' (the low watermark). The request's
// operation lock guards it.
type partWait struct {
	tp       tpKey
	required int64       // the offset the watermark must reach
	settled  bool        // answered: err says how
	err      *kerr.Error // nil: NONE
	msg      string      // why, for errors the client cannot guess
}

func (w *partWait) settle(e *kerr.Error, msg string) {
	w.settled, w.err, w.msg = true, e, msg
}

func (w *partWait) wait() *partWait { return w }

// waiter is a request's status of one partition, which embeds a partWait.
type waiter interface{ wait() *partWait }

// watchLevel is the offset a request whose partitions are ws waits for on
// tp: it is watched at that level (purgatory.Leveled), so that a move of
// the watermark tries only the requests it reached. A tp that is not one
// of its partitions is due at once.
func watchLevel[S waiter](ws []S, tp tpKey) int64 {
	for _, s := range ws {
		if w := s.wait(); w.tp == tp {
			return w.required
		}
	}
	return 0
}

// unsettled are the partitions of ws still waiting: the keys the request
// is watched on.
func unsettled[S waiter](ws []S) []tpKey {
	keys := make([]tpKey, 0, len(ws))
	for _, s := range ws {
		if w := s.wait(); !w.settled {
			keys = append(keys, w.tp)
		}
	}
	return keys
}
