package abi

import (
	"sync/atomic"

	"github.com/theseus-ccl/theseus/runtime/log"
)

// registration is one ncclCommRegister handle: the engine's registration
// and, when the communicator has a shadow, the fallback NCCL's.
type registration struct {
	id     uint64
	shadow uintptr
}

// regHandles numbers registration handles across the library: nonzero,
// never reused, never a pointer the client could mistake for memory.
var regHandles atomic.Uint64

// Register is ncclCommRegister, native (the engine records the allocation;
// runtime/comm.Comm.Register): no fallback NCCL needed. With a shadow
// communicator the buffer is registered there too, for the calls the
// fallback serves. Errors: InvalidArgument for a NULL buffer or size 0;
// the communicator's state errors.
func (l *Library) Register(h, buf uintptr, size uint64) (uintptr, Result) {
	const api = "ncclCommRegister"
	c, e := l.usable(h, api)
	if e != nil {
		return 0, l.fail(e)
	}
	if buf == 0 || size == 0 || size > 1<<62 {
		return 0, l.Fail(InvalidArgument, "%s: buffer %#x of %d bytes", api, buf, size)
	}
	<-c.ready
	eng, sh := c.engine()
	if eng == nil {
		return 0, l.Fail(InvalidUsage, "%s: comm %#x did not initialise", api, h)
	}
	id, err := eng.Register(buf, size)
	if err != nil {
		return 0, l.fail(l.classify(api, err))
	}
	reg := &registration{id: id}
	if sh != 0 {
		if fh, r := l.FB.Register(sh, buf, size); r == Success {
			reg.shadow = fh
		} else {
			log.Warnf(log.Init, "%s: the fallback NCCL could not register %#x+%d (%s: %s); calls it serves use the buffer unregistered", api, buf, size, r, l.FB.LastError())
		}
	}
	hd := uintptr(1<<44 | regHandles.Add(1)<<4)
	c.mu.Lock()
	if c.regs == nil {
		c.regs = map[uintptr]*registration{}
	}
	c.regs[hd] = reg
	c.mu.Unlock()
	return hd, Success
}

// Deregister is ncclCommDeregister, native: when the handle was its
// allocation's last registration, every cache entry of it — this rank's,
// and every peer's import — is gone before it returns, so the buffer may be
// freed afterwards (runtime/comm.Comm.Deregister). The shadow's
// registration, if any, is deregistered too. Errors: InvalidArgument for a
// handle ncclCommRegister did not return for this communicator (or one
// deregistered already); RemoteError when a peer does not confirm.
func (l *Library) Deregister(h, handle uintptr) Result {
	const api = "ncclCommDeregister"
	c, e := l.lookup(h, api)
	if e != nil {
		return l.fail(e)
	}
	c.mu.Lock()
	reg := c.regs[handle]
	delete(c.regs, handle)
	c.mu.Unlock()
	if reg == nil {
		return l.Fail(InvalidArgument, "%s: %#x is not a registration handle of comm %#x", api, handle, h)
	}
	eng, sh := c.engine()
	var first *Error
	if eng != nil {
		if err := eng.Deregister(reg.id); err != nil {
			first = l.classify(api, err)
		}
	}
	if reg.shadow != 0 && sh != 0 {
		if r := l.FB.Deregister(sh, reg.shadow); r != Success && first == nil {
			first = errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError())
		}
	}
	return l.fail(first)
}
