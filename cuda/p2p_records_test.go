package cuda

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// fakePortConn is a port connection that only has a FIFO address (the
// records read no more).
type fakePortConn struct {
	device.PortConn
	fifo device.Ptr
}

func (f fakePortConn) FIFO() device.Ptr { return f.fifo }

// TestP2PRecordsAcrossNodes: the launch records of a point-to-point launch
// with a peer of this node and one on another node (no GPU needed): the
// port peer's record carries its lanes (each a FIFO and ticket counter),
// block regions and, per channel, its arrival and credit channels; the
// peer of this node none of them; a port peer without lanes, a lane
// without a FIFO or ticket counter, too few channels or imports are
// refused, naming it.
func TestP2PRecordsAcrossNodes(t *testing.T) {
	g := launch.P2PGeometry{ChunkBytes: 4096, Slots: 4, Channels: 3}
	blk := func(p device.Ptr) device.Mem { return device.Mem{Ptr: p, Size: g.ConnBytes()} }
	lanes := []device.P2PLane{{Conn: fakePortConn{fifo: 0x7000}, Head: 0x8000}, {Conn: fakePortConn{fifo: 0x7100}, Head: 0x8100}}
	port := &device.P2PPort{Lanes: lanes, Src: 5, Dst: 9, Arrive: []uint16{1, 3, 5}, Credit: []uint16{2, 4, 6}}
	x := device.P2PXfer{Buf: 0x1000, Bytes: 70001, DataType: ir.Int8}
	a := &device.P2PArgs{Rank: 1, NRanks: 4, Geometry: g,
		Sends: []device.P2PPeer{
			{Peer: 0, Local: blk(0x10000), Remote: blk(0x20000), Xfers: []device.P2PXfer{x}},
			{Peer: 2, Local: blk(0x30000), Remote: blk(0x40000), Xfers: []device.P2PXfer{x}, Port: port},
		},
		Recvs: []device.P2PPeer{{Peer: 2, Local: blk(0x30000), Remote: blk(0x40000), Xfers: []device.P2PXfer{x, x}, Port: port}},
	}
	r, err := p2pRecords(a)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.peers) != 3 || len(r.xfers) != 4 {
		t.Fatalf("%d peers, %d transfers; want 3 and 4", len(r.peers), len(r.xfers))
	}
	type rec struct {
		Peer               int
		Local, Remote      uint64
		LaneFirst, NLanes  uint32
		ChanFirst          uint32
		SrcRegion, DstRegn uint16
		First, NXfer       uint32
	}
	var got []rec
	for _, p := range r.peers {
		got = append(got, rec{int(p.peer), uint64(p.local), uint64(p.remote), uint32(p.lane_first), uint32(p.nlanes), uint32(p.chan_first),
			uint16(p.src_region), uint16(p.dst_region), uint32(p.first), uint32(p.nxfer)})
	}
	want := []rec{
		{Peer: 0, Local: 0x10000, Remote: 0x20000, First: 0, NXfer: 1},
		{Peer: 2, Local: 0x30000, Remote: 0x40000, LaneFirst: 0, NLanes: 2, ChanFirst: 0, SrcRegion: 5, DstRegn: 9, First: 1, NXfer: 1},
		{Peer: 2, Local: 0x30000, Remote: 0x40000, LaneFirst: 2, NLanes: 2, ChanFirst: 6, SrcRegion: 5, DstRegn: 9, First: 2, NXfer: 2},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("peer records (-want +got):\n%s", d)
	}
	// Each port peer's lanes, in order.
	type lane struct{ FIFO, Head uint64 }
	var gotLanes []lane
	for _, l := range r.lanes {
		gotLanes = append(gotLanes, lane{uint64(l.fifo), uint64(l.head)})
	}
	if d := cmp.Diff([]lane{{0x7000, 0x8000}, {0x7100, 0x8100}, {0x7000, 0x8000}, {0x7100, 0x8100}}, gotLanes); d != "" {
		t.Errorf("lanes (-want +got):\n%s", d)
	}
	// Channel ch of a port peer: chans[first+2ch] arrival, +1 credit.
	if d := cmp.Diff([]uint16{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}, r.chans); d != "" {
		t.Errorf("proxy channels (-want +got):\n%s", d)
	}

	for name, tc := range map[string]struct {
		port    device.P2PPort
		imports []device.P2PImport
		msg     string
	}{
		"no lanes":    {device.P2PPort{Arrive: port.Arrive, Credit: port.Credit}, nil, "0 lane(s), not each with a FIFO and ticket counter"},
		"no head":     {device.P2PPort{Lanes: []device.P2PLane{lanes[0], {Conn: lanes[1].Conn}}, Arrive: port.Arrive, Credit: port.Credit}, nil, "2 lane(s), not each with a FIFO and ticket counter"},
		"no FIFO":     {device.P2PPort{Lanes: []device.P2PLane{{Conn: fakePortConn{}, Head: 8}}, Arrive: port.Arrive, Credit: port.Credit}, nil, "1 lane(s), not each with a FIFO and ticket counter"},
		"no channels": {device.P2PPort{Lanes: lanes, Arrive: port.Arrive[:2], Credit: port.Credit}, nil, "2 arrival and 3 credit channels for 3 channels"},
		"imports":     {*port, []device.P2PImport{{ID: 1}}, "1 imports"},
	} {
		pt := tc.port
		b := &device.P2PArgs{Rank: 1, NRanks: 4, Geometry: g,
			Sends: []device.P2PPeer{{Peer: 3, Local: blk(0x30000), Remote: blk(0x40000), Port: &pt, Imports: tc.imports}}}
		_, err := p2pRecords(b)
		if err == nil || !strings.Contains(err.Error(), "rank 3 on another node") || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want an error naming rank 3 and %q", name, err, tc.msg)
		}
	}
}
