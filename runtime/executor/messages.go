package executor

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/theseus-ccl/theseus/runtime/device"
)

// The messages ranks exchange over the bootstrap network, little-endian
// (docs/executor.md, "Messages"). Each decoder rejects a malformed message
// (short, over-long, trailing bytes, out-of-range values) with an error
// and never panics; encodings are canonical: decode(encode(m)) == m and
// encode(decode(b)) == b for every b a decoder accepts.

// errMessage is wrapped by every decoding error.
var errMessage = errors.New("malformed message")

// l0Msg is a rank's contribution to the L0 allgather: its scratch size and
// the handles of its scratch, control words and first semaphore pool.
type l0Msg struct {
	Scratch int64
	Handles [3]device.Handle
}

// growMsg is a rank's contribution to a scratch growth's allgather.
type growMsg struct {
	Scratch int64
	Handle  device.Handle
}

// slotMsg gives a peer the semaphore slots of the sender's new channel ends
// toward it, and the handles of pools the peer has not imported yet.
type slotMsg struct {
	Slots []slotRef
	Pools []poolRef
}

type slotRef struct {
	Channel, Pool, Index uint32
}

type poolRef struct {
	ID     uint32
	Handle device.Handle
}

// regMsg gives a peer the handles of the sender's allocations it reaches
// (L2): kind 0 input, 1 output.
type regMsg []regRef

type regRef struct {
	Kind   uint32
	Handle device.Handle
}

// offMsg tells a peer where this request's buffers lie in the allocations
// it imported (L3).
type offMsg []offRef

type offRef struct {
	Kind      uint32
	Off, Size int64
}

type writer []byte

func (w *writer) u32(v uint32) { *w = binary.LittleEndian.AppendUint32(*w, v) }
func (w *writer) u64(v uint64) { *w = binary.LittleEndian.AppendUint64(*w, v) }
func (w *writer) handle(h device.Handle) {
	*w = binary.LittleEndian.AppendUint16(*w, uint16(len(h)))
	*w = append(*w, h...)
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errMessage, what)
	}
}

func (r *reader) u64() uint64 {
	if len(r.b) < 8 {
		r.fail("short")
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) u32() uint32 {
	if len(r.b) < 4 {
		r.fail("short")
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) handle() device.Handle {
	if len(r.b) < 2 {
		r.fail("short")
		return nil
	}
	n := int(binary.LittleEndian.Uint16(r.b))
	if n > device.MaxHandle || len(r.b) < 2+n {
		r.fail("bad handle length")
		return nil
	}
	h := device.Handle(append([]byte(nil), r.b[2:2+n]...))
	r.b = r.b[2+n:]
	return h
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) > 0 {
		r.fail(fmt.Sprintf("%d trailing bytes", len(r.b)))
	}
	return r.err
}

func (m l0Msg) encode() []byte {
	var w writer
	w.u64(uint64(m.Scratch))
	for _, h := range m.Handles {
		w.handle(h)
	}
	return w
}

func decodeL0(b []byte) (l0Msg, error) {
	r := reader{b: b}
	var m l0Msg
	m.Scratch = int64(r.u64())
	for i := range m.Handles {
		m.Handles[i] = r.handle()
	}
	if m.Scratch < 0 {
		r.fail("negative scratch size")
	}
	return m, r.done()
}

func (m growMsg) encode() []byte {
	var w writer
	w.u64(uint64(m.Scratch))
	w.handle(m.Handle)
	return w
}

func decodeGrow(b []byte) (growMsg, error) {
	r := reader{b: b}
	m := growMsg{Scratch: int64(r.u64()), Handle: r.handle()}
	if m.Scratch < 0 {
		r.fail("negative scratch size")
	}
	return m, r.done()
}

func (m slotMsg) encode() []byte {
	var w writer
	w.u32(uint32(len(m.Slots)))
	for _, s := range m.Slots {
		w.u32(s.Channel)
		w.u32(s.Pool)
		w.u32(s.Index)
	}
	w.u32(uint32(len(m.Pools)))
	for _, p := range m.Pools {
		w.u32(p.ID)
		w.handle(p.Handle)
	}
	return w
}

func decodeSlots(b []byte) (slotMsg, error) {
	r := reader{b: b}
	var m slotMsg
	n := r.u32()
	if uint64(n)*12 > uint64(len(r.b)) {
		r.fail("slot count past the end")
	}
	for i := uint32(0); i < n && r.err == nil; i++ {
		s := slotRef{Channel: r.u32(), Pool: r.u32(), Index: r.u32()}
		if s.Index >= poolSlots {
			r.fail("slot index out of range")
		}
		m.Slots = append(m.Slots, s)
	}
	np := r.u32()
	if uint64(np)*6 > uint64(len(r.b)) {
		r.fail("pool count past the end")
	}
	for i := uint32(0); i < np && r.err == nil; i++ {
		m.Pools = append(m.Pools, poolRef{ID: r.u32(), Handle: r.handle()})
	}
	return m, r.done()
}

func (m regMsg) encode() []byte {
	var w writer
	for _, g := range m {
		w.u32(g.Kind)
		w.handle(g.Handle)
	}
	return w
}

func decodeRegs(b []byte) (regMsg, error) {
	r := reader{b: b}
	var m regMsg
	for len(r.b) > 0 && r.err == nil {
		g := regRef{Kind: r.u32(), Handle: r.handle()}
		if g.Kind > 1 {
			r.fail("buffer kind out of range")
		}
		m = append(m, g)
	}
	return m, r.done()
}

func (m offMsg) encode() []byte {
	var w writer
	for _, o := range m {
		w.u32(o.Kind)
		w.u64(uint64(o.Off))
		w.u64(uint64(o.Size))
	}
	return w
}

func decodeOffsets(b []byte) (offMsg, error) {
	r := reader{b: b}
	var m offMsg
	for len(r.b) > 0 && r.err == nil {
		o := offRef{Kind: r.u32(), Off: int64(r.u64()), Size: int64(r.u64())}
		if o.Kind > 1 || o.Off < 0 || o.Size < 0 {
			r.fail("offset entry out of range")
		}
		m = append(m, o)
	}
	return m, r.done()
}

// portHandle stands for a device handle in a registration message to a
// peer on another node (regMsg): the allocation's region id on the
// connection and its size.
func portHandle(id uint16, size int64) device.Handle {
	var w writer
	w.u32(uint32(id))
	w.u64(uint64(size))
	return device.Handle(w)
}

func decodePortHandle(h device.Handle) (uint16, int64, error) {
	r := reader{b: h}
	id := r.u32()
	size := int64(r.u64())
	if r.err == nil && (id > 0xffff || size <= 0 || len(r.b) != 0) {
		r.fail("region id or size out of range")
	}
	return uint16(id), size, r.err
}
