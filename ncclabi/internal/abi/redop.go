package abi

// RedOpCreatePreMulSum is ncclRedOpCreatePreMulSum: the op is created on
// the shadow communicator, and collectives using it run on the fallback.
func (l *Library) RedOpCreatePreMulSum(h, scalar uintptr, dt DataType, residence int32) (RedOp, Result) {
	const api = "ncclRedOpCreatePreMulSum"
	c, e := l.usable(h, api)
	if e != nil {
		return 0, l.fail(e)
	}
	if !dt.Valid() {
		return 0, l.Fail(InvalidArgument, "%s: invalid datatype %d", api, int32(dt))
	}
	if residence != 0 && residence != 1 {
		return 0, l.Fail(InvalidArgument, "%s: invalid residence %d (ncclScalarDevice 0 or ncclScalarHostImmediate 1)", api, residence)
	}
	if scalar == 0 {
		return 0, l.Fail(InvalidArgument, "%s: scalar is NULL", api)
	}
	<-c.ready
	_, sh := c.engine()
	if l.FB == nil || sh == 0 {
		return 0, l.Reject(api, "pre-multiplied sums run on the fallback NCCL, and there is none ("+l.whyNoShadow()+")")
	}
	op, r := l.FB.RedOpCreatePreMulSum(sh, scalar, dt, residence)
	if r != Success {
		return 0, l.fail(errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError()))
	}
	c.mu.Lock()
	c.userOps[op] = dt
	c.mu.Unlock()
	return op, Success
}

// RedOpDestroy is ncclRedOpDestroy.
func (l *Library) RedOpDestroy(h uintptr, op RedOp) Result {
	const api = "ncclRedOpDestroy"
	c, e := l.lookup(h, api)
	if e != nil {
		return l.fail(e)
	}
	if op.Builtin() {
		return l.Fail(InvalidArgument, "%s: op %d is built in", api, int32(op))
	}
	if !c.isUserOp(op) {
		return l.Fail(InvalidArgument, "%s: op %d was not made by ncclRedOpCreatePreMulSum on comm %#x", api, int32(op), h)
	}
	_, sh := c.engine()
	c.mu.Lock()
	delete(c.userOps, op)
	c.mu.Unlock()
	if r := l.FB.RedOpDestroy(sh, op); r != Success {
		return l.fail(errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError()))
	}
	return Success
}
