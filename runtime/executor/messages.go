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

// exportID is the identity of an allocation a rank exports to its peers
// (executor level L2): the allocation (its base, size and generation,
// which the backend never reuses, so an allocation freed and made again
// at the same address is another one) and its registration (Register; 0
// when it is not registered).
type exportID struct {
	Region device.Region
	Reg    uint64
}

// The requests a rank's service goroutines answer (serve): the first byte
// says which, the body follows.
const (
	svcPush = 1 // pushMsg
	svcDrop = 2 // dropMsg
)

// pushMsg tells a peer where the sender's buffers of its launch Launch lie,
// in the allocations of the sender's that the peer reaches, with the
// handle of each allocation the peer has not imported yet. After is the
// sender's last launch before Launch that was not captured into a CUDA
// graph: the peer's launches up to it read their bindings before it
// repoints them.
type pushMsg struct {
	Launch, After uint64
	Bufs          []pushBuf
}

type pushBuf struct {
	Kind      uint32 // 0 input, 1 output
	ID        exportID
	Off, Size int64         // the buffer's place in the allocation, in bytes
	Handle    device.Handle // nil when the peer has imported ID already
}

// dropMsg tells a peer that the sender deregistered an allocation
// (Deregister): the peer drops every import of it once its own launches up
// to Last (the sender's last launch that used it) have finished.
type dropMsg struct {
	Last   uint64
	Region device.Region
}

// ackMsg is a service goroutine's answer to a request: Err is empty when
// it was carried out.
type ackMsg struct{ Err string }

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

func (w *writer) region(r device.Region) {
	w.u64(uint64(r.Base))
	w.u64(uint64(r.Size))
	w.u64(r.Gen)
}

func (r *reader) region() device.Region {
	g := device.Region{Base: device.Ptr(r.u64()), Size: int64(r.u64()), Gen: r.u64()}
	if g.Size < 0 {
		r.fail("negative allocation size")
	}
	return g
}

func (m pushMsg) encode() []byte {
	w := writer{svcPush}
	w.u64(m.Launch)
	w.u64(m.After)
	w.u32(uint32(len(m.Bufs)))
	for _, b := range m.Bufs {
		w.u32(b.Kind)
		w.region(b.ID.Region)
		w.u64(b.ID.Reg)
		w.u64(uint64(b.Off))
		w.u64(uint64(b.Size))
		w.handle(b.Handle)
	}
	return w
}

func (m dropMsg) encode() []byte {
	w := writer{svcDrop}
	w.u64(m.Last)
	w.region(m.Region)
	return w
}

// decodeService decodes a request to a service goroutine: its type and
// the push or the drop it carries.
func decodeService(b []byte) (typ byte, push pushMsg, drop dropMsg, err error) {
	if len(b) == 0 {
		return 0, push, drop, fmt.Errorf("%w: empty request", errMessage)
	}
	typ = b[0]
	r := reader{b: b[1:]}
	switch typ {
	case svcPush:
		push.Launch, push.After = r.u64(), r.u64()
		if push.After >= push.Launch && r.err == nil {
			r.fail("a launch before the pushed one that is not before it")
		}
		n := r.u32()
		if uint64(n)*54 > uint64(len(r.b)) {
			r.fail("buffer count past the end")
		}
		for i := uint32(0); i < n && r.err == nil; i++ {
			pb := pushBuf{Kind: r.u32(), ID: exportID{Region: r.region(), Reg: r.u64()}, Off: int64(r.u64()), Size: int64(r.u64())}
			pb.Handle = r.handle()
			if pb.Kind > 1 || pb.Off < 0 || pb.Size < 0 {
				r.fail("buffer out of range")
			}
			push.Bufs = append(push.Bufs, pb)
		}
	case svcDrop:
		drop = dropMsg{Last: r.u64(), Region: r.region()}
	default:
		r.fail(fmt.Sprintf("request type %d", typ))
	}
	return typ, push, drop, r.done()
}

func (m ackMsg) encode() []byte {
	var w writer
	w.u32(uint32(len(m.Err)))
	return append(w, m.Err...)
}

func decodeAck(b []byte) (ackMsg, error) {
	r := reader{b: b}
	n := r.u32()
	if uint64(n) > uint64(len(r.b)) {
		r.fail("text past the end")
		return ackMsg{}, r.done()
	}
	m := ackMsg{Err: string(r.b[:n])}
	r.b = r.b[n:]
	return m, r.done()
}

// p2pConnMsg is a rank's half of a point-to-point connection (p2p.go): the
// geometry it connects with and the handle of its block for the peer.
type p2pConnMsg struct {
	ChunkBytes      int64
	Slots, Channels uint32
	Handle          device.Handle
	// Region is, across nodes, 1 + the block's region id on the pair's
	// proxy connection (no Handle then), 0 on one node.
	Region uint32
}

// p2pOfferMsg offers the peer one of the sender's allocations, which it
// receives into, for zero-copy writes: the offer's id (nonzero, which the
// sender's receives into it post), its base and size in the sender's
// address space, and its handle.
type p2pOfferMsg struct {
	ID     uint64
	Base   uint64
	Size   int64
	Handle device.Handle
}

func (m p2pConnMsg) encode() []byte {
	var w writer
	w.u64(uint64(m.ChunkBytes))
	w.u32(m.Slots)
	w.u32(m.Channels)
	w.handle(m.Handle)
	w.u32(m.Region)
	return w
}

func decodeP2PConn(b []byte) (p2pConnMsg, error) {
	r := reader{b: b}
	m := p2pConnMsg{ChunkBytes: int64(r.u64()), Slots: r.u32(), Channels: r.u32(), Handle: r.handle(), Region: r.u32()}
	if m.ChunkBytes < 0 {
		r.fail("negative chunk size")
	}
	if m.Region > 1<<16 {
		r.fail("region id out of range")
	}
	return m, r.done()
}

func (m p2pOfferMsg) encode() []byte {
	var w writer
	w.u64(m.ID)
	w.u64(m.Base)
	w.u64(uint64(m.Size))
	w.handle(m.Handle)
	return w
}

func decodeP2POffer(b []byte) (p2pOfferMsg, error) {
	r := reader{b: b}
	m := p2pOfferMsg{ID: r.u64(), Base: r.u64(), Size: int64(r.u64()), Handle: r.handle()}
	if m.Size <= 0 && r.err == nil {
		r.fail("offered allocation of no bytes")
	}
	return m, r.done()
}
