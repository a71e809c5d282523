package abi

import "github.com/theseus-ccl/theseus/runtime/log"

// runFallback runs calls on the shadow communicators, inside one real
// ncclGroupStart/End when there are several, on the calling thread.
func (l *Library) runFallback(fb []groupOp, r *opResults) {
	var can []groupOp
	for _, g := range fb {
		_, sh := g.c.engine()
		if l.FB == nil || sh == 0 {
			g.c.nReject.Add(1)
			_, why := needsFallback(g.op)
			if why == "" {
				why = g.op.NoNative
			}
			if why == "" {
				why = "no Theseus schedule serves this request"
			}
			r.record(g.c, errorf(InvalidUsage, "nccl%s: %s, but there is no fallback NCCL (%s)", g.op.Coll, why, l.whyNoShadow()))
			continue
		}
		can = append(can, g)
	}
	if len(can) == 0 {
		return
	}
	grouped := len(can) > 1
	if grouped {
		l.FB.GroupStart()
	}
	for _, g := range can {
		_, sh := g.c.engine()
		n := g.c.opCount.Add(1)
		if res := l.FB.Run(sh, g.op); res != Success && res != InProgress {
			g.c.nReject.Add(1)
			r.record(g.c, errorf(res, "nccl%s: fallback NCCL: %s", g.op.Coll, l.FB.LastError()))
			continue
		}
		cnt := g.c.nFallbk.Add(1)
		if log.On(log.Info, log.Coll) {
			log.Infof(log.Coll, "nccl%s: opCount %d comm %#x rank %d count %d datatype %s peer/root %d stream %#x served by the fallback NCCL (%d fallback requests on this comm)", g.op.Coll, n, g.c.Handle, g.c.Rank(), g.op.Count, g.op.DataType, g.op.Root, g.op.Stream, cnt)
		}
	}
	if grouped {
		if res := l.FB.GroupEnd(); res != Success && res != InProgress {
			e := errorf(res, "ncclGroupEnd: fallback NCCL: %s", l.FB.LastError())
			for _, g := range can {
				r.record(g.c, e)
			}
		}
	}
}

func (l *Library) whyNoShadow() string {
	if l.FB == nil {
		return l.FBReason
	}
	return "this communicator has no shadow NCCL communicator"
}
