package abi

// Register is ncclCommRegister: forwarded to the shadow communicator.
func (l *Library) Register(h, buf uintptr, size uint64) (uintptr, Result) {
	const api = "ncclCommRegister"
	c, e := l.usable(h, api)
	if e != nil {
		return 0, l.fail(e)
	}
	<-c.ready
	_, sh := c.engine()
	if l.FB == nil || sh == 0 {
		return 0, l.Reject(api, "buffer registration is served by the fallback NCCL, and there is none ("+l.whyNoShadow()+")")
	}
	hd, r := l.FB.Register(sh, buf, size)
	if r != Success {
		return 0, l.fail(errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError()))
	}
	return hd, Success
}

// Deregister is ncclCommDeregister: forwarded to the shadow communicator.
func (l *Library) Deregister(h, handle uintptr) Result {
	const api = "ncclCommDeregister"
	c, e := l.lookup(h, api)
	if e != nil {
		return l.fail(e)
	}
	_, sh := c.engine()
	if l.FB == nil || sh == 0 {
		return l.Reject(api, "buffer registration is served by the fallback NCCL, and there is none ("+l.whyNoShadow()+")")
	}
	if r := l.FB.Deregister(sh, handle); r != Success {
		return l.fail(errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError()))
	}
	return Success
}
