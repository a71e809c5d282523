package executor

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/runtime/device"
)

func TestMessagesRoundTrip(t *testing.T) {
	h := device.Handle("handle-bytes")
	l0 := l0Msg{Scratch: 1 << 24, Handles: [3]device.Handle{h, device.Handle("b"), nil}}
	if got, err := decodeL0(l0.encode()); err != nil || !cmp.Equal(got, l0) {
		t.Errorf("l0: %+v, %v", got, err)
	}
	g := growMsg{Scratch: 1 << 30, Handle: h}
	if got, err := decodeGrow(g.encode()); err != nil || !cmp.Equal(got, g) {
		t.Errorf("grow: %+v, %v", got, err)
	}
	sm := slotMsg{Slots: []slotRef{{Channel: 3, Pool: 0, Index: 7}, {Channel: 1, Pool: 2, Index: 0}}, Pools: []poolRef{{ID: 2, Handle: h}}}
	if got, err := decodeSlots(sm.encode()); err != nil || !cmp.Equal(got, sm) {
		t.Errorf("slots: %+v, %v", got, err)
	}
	pm := pushMsg{Launch: 42, After: 41, Bufs: []pushBuf{
		{Kind: 0, ID: exportID{Region: device.Region{Base: 0x7f0000001000, Size: 1 << 20, Gen: 9}, Reg: 3}, Off: 4096, Size: 28, Handle: h},
		{Kind: 1, ID: exportID{Region: device.Region{Base: 0x7f0000200000, Size: 4096, Gen: 10}}, Off: 0, Size: 4096},
	}}
	if typ, got, _, err := decodeService(pm.encode()); err != nil || typ != svcPush || !cmp.Equal(got, pm) {
		t.Errorf("push: %d %+v, %v", typ, got, err)
	}
	dm := dropMsg{Last: 7, Region: device.Region{Base: 0x1000, Size: 4096, Gen: 2}}
	if typ, _, got, err := decodeService(dm.encode()); err != nil || typ != svcDrop || !cmp.Equal(got, dm) {
		t.Errorf("drop: %d %+v, %v", typ, got, err)
	}
	for _, am := range []ackMsg{{}, {Err: "refused"}} {
		if got, err := decodeAck(am.encode()); err != nil || got != am {
			t.Errorf("ack: %+v, %v", got, err)
		}
	}
	pc := p2pConnMsg{ChunkBytes: 1 << 17, Slots: 4, Channels: 8, Handle: h}
	if got, err := decodeP2PConn(pc.encode()); err != nil || !cmp.Equal(got, pc) {
		t.Errorf("p2p connection: %+v, %v", got, err)
	}
	po := p2pOfferMsg{ID: 7, Base: 0x7f0000001000, Size: 1 << 20, Handle: h}
	if got, err := decodeP2POffer(po.encode()); err != nil || !cmp.Equal(got, po) {
		t.Errorf("p2p offer: %+v, %v", got, err)
	}
}

func TestMessagesRejectMalformed(t *testing.T) {
	good := slotMsg{Slots: []slotRef{{Channel: 1, Pool: 0, Index: 1}}}.encode()
	for name, tc := range map[string]struct {
		kind byte
		data []byte
	}{
		"empty l0":              {0, nil},
		"l0 trailing":           {0, append(l0Msg{}.encode(), 0)},
		"negative scratch":      {1, growMsg{Scratch: -1}.encode()},
		"slots short":           {2, good[:len(good)-1]},
		"slot count past end":   {2, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}},
		"slot index too large":  {2, slotMsg{Slots: []slotRef{{Index: poolSlots}}}.encode()},
		"handle past end":       {3, append(pushMsg{Bufs: []pushBuf{{}}}.encode()[:len(pushMsg{Bufs: []pushBuf{{}}}.encode())-2], 9, 0, 1)},
		"push kind 2":           {3, pushMsg{Bufs: []pushBuf{{Kind: 2}}}.encode()},
		"push negative offset":  {3, pushMsg{Bufs: []pushBuf{{Off: -1}}}.encode()},
		"push count past end":   {3, []byte{svcPush, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0}},
		"push after launch":     {3, pushMsg{Launch: 3, After: 3}.encode()},
		"negative region size":  {3, dropMsg{Region: device.Region{Size: -1}}.encode()},
		"unknown request":       {3, []byte{9}},
		"empty request":         {3, nil},
		"drop short":            {3, dropMsg{}.encode()[:10]},
		"ack text past end":     {4, []byte{5, 0, 0, 0, 'a'}},
		"ack trailing":          {4, append(ackMsg{Err: "x"}.encode(), 0)},
		"handle over MaxHandle": {3, append(pushMsg{Bufs: []pushBuf{{}}}.encode()[:len(pushMsg{Bufs: []pushBuf{{}}}.encode())-2], 0xff, 0xff)},
		"p2p negative chunk":    {5, p2pConnMsg{ChunkBytes: -1}.encode()},
		"p2p connection short":  {5, p2pConnMsg{ChunkBytes: 1}.encode()[:9]},
		"p2p offer empty":       {6, p2pOfferMsg{ID: 1}.encode()},
		"p2p offer trailing":    {6, append(p2pOfferMsg{Size: 1}.encode(), 0)},
	} {
		if err := decodeKind(tc.kind, tc.data); !errors.Is(err, errMessage) {
			t.Errorf("%s: %v, want errMessage", name, err)
		}
	}
}

// decodeKindEnc decodes data as message kind k and re-encodes it.
func decodeKindEnc(k byte, data []byte) ([]byte, error) {
	switch k % 7 {
	case 0:
		m, err := decodeL0(data)
		return m.encode(), err
	case 1:
		m, err := decodeGrow(data)
		return m.encode(), err
	case 2:
		m, err := decodeSlots(data)
		return m.encode(), err
	case 3:
		typ, push, drop, err := decodeService(data)
		if typ == svcDrop {
			return drop.encode(), err
		}
		return push.encode(), err
	case 4:
		m, err := decodeAck(data)
		return m.encode(), err
	case 5:
		m, err := decodeP2PConn(data)
		return m.encode(), err
	default:
		m, err := decodeP2POffer(data)
		return m.encode(), err
	}
}

func decodeKind(k byte, data []byte) error {
	_, err := decodeKindEnc(k, data)
	return err
}

// FuzzMessages: decoding a peer's message never panics, errors wrap
// errMessage, and an accepted message re-encodes to its own bytes.
func FuzzMessages(f *testing.F) {
	f.Add(byte(0), l0Msg{Scratch: 4096, Handles: [3]device.Handle{device.Handle("a"), nil, device.Handle("ccc")}}.encode())
	f.Add(byte(2), slotMsg{Slots: []slotRef{{Channel: 1, Pool: 0, Index: 3}}, Pools: []poolRef{{ID: 1, Handle: device.Handle("p")}}}.encode())
	f.Add(byte(3), pushMsg{Launch: 5, After: 3, Bufs: []pushBuf{{Kind: 1, ID: exportID{Region: device.Region{Base: 64, Size: 4096, Gen: 1}, Reg: 2}, Off: 64, Size: 28, Handle: device.Handle("h")}}}.encode())
	f.Add(byte(3), dropMsg{Last: 3, Region: device.Region{Base: 64, Size: 4096, Gen: 1}}.encode())
	f.Add(byte(4), ackMsg{Err: "no"}.encode())
	f.Add(byte(5), p2pConnMsg{ChunkBytes: 4096, Slots: 2, Channels: 4, Handle: device.Handle("c")}.encode())
	f.Add(byte(6), p2pOfferMsg{ID: 3, Base: 4096, Size: 64, Handle: device.Handle("o")}.encode())
	f.Fuzz(func(t *testing.T, k byte, data []byte) {
		enc, err := decodeKindEnc(k, data)
		if err != nil {
			if !errors.Is(err, errMessage) {
				t.Fatalf("error %v does not wrap errMessage", err)
			}
			return
		}
		if !bytes.Equal(enc, data) && !(len(data) == 0 && len(enc) == 0) {
			t.Fatalf("kind %d: %x re-encodes to %x", k%7, data, enc)
		}
	})
}
