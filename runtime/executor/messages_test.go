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
	rm := regMsg{{Kind: 0, Handle: h}, {Kind: 1, Handle: h}}
	if got, err := decodeRegs(rm.encode()); err != nil || !cmp.Equal(got, rm) {
		t.Errorf("regs: %+v, %v", got, err)
	}
	om := offMsg{{Kind: 1, Off: 4096, Size: 28}}
	if got, err := decodeOffsets(om.encode()); err != nil || !cmp.Equal(got, om) {
		t.Errorf("offsets: %+v, %v", got, err)
	}
	pc := p2pConnMsg{ChunkBytes: 1 << 17, Slots: 4, Channels: 8, Handle: h}
	if got, err := decodeP2PConn(pc.encode()); err != nil || !cmp.Equal(got, pc) {
		t.Errorf("p2p connection: %+v, %v", got, err)
	}
	po := p2pOfferMsg{Gen: 7, Base: 0x7f0000001000, Size: 1 << 20, Handle: h}
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
		"handle past end":       {3, []byte{0, 0, 0, 0, 9, 0, 1}},
		"reg kind 2":            {3, regMsg{{Kind: 2}}.encode()},
		"negative offset":       {4, offMsg{{Kind: 0, Off: -1}}.encode()},
		"offset entry short":    {4, offMsg{{Kind: 0}}.encode()[:10]},
		"handle over MaxHandle": {3, append([]byte{0, 0, 0, 0, 0xff, 0xff}, make([]byte, 1<<16)...)},
		"p2p negative chunk":    {5, p2pConnMsg{ChunkBytes: -1}.encode()},
		"p2p connection short":  {5, p2pConnMsg{ChunkBytes: 1}.encode()[:9]},
		"p2p offer empty":       {6, p2pOfferMsg{Gen: 1}.encode()},
		"p2p offer trailing":    {6, append(p2pOfferMsg{Size: 1}.encode(), 0)},
	} {
		if err := decodeKind(tc.kind, tc.data); !errors.Is(err, errMessage) {
			t.Errorf("%s: %v, want errMessage", name, err)
		}
	}
}

// decodeKind decodes data as message kind k and re-encodes it.
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
		m, err := decodeRegs(data)
		return m.encode(), err
	case 4:
		m, err := decodeOffsets(data)
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
	f.Add(byte(4), offMsg{{Kind: 1, Off: 64, Size: 28}}.encode())
	f.Add(byte(5), p2pConnMsg{ChunkBytes: 4096, Slots: 2, Channels: 4, Handle: device.Handle("c")}.encode())
	f.Add(byte(6), p2pOfferMsg{Gen: 3, Base: 4096, Size: 64, Handle: device.Handle("o")}.encode())
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
