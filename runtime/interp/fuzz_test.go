package interp

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"runtime"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/runtime/interp/internal/progs"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// selfProgram is a 1-rank program that uses every primitive: a channel
// whose two ends are both on rank 0, signal/wait/flush on them, a remote
// ref through it, scratch, two threadblocks with a dependency and a
// barrier.
func selfProgram(proto ir.Protocol) *ir.Program {
	b := irtest.New(ir.AllReduce, 1, 2).Protocol(proto).Arrangements(true, true)
	a, c := b.Connect(0, 0, ir.MemoryChannel, 1, 0)
	rb := b.Rank(0).Chunks(0, 0, 2)
	t0, t1 := rb.PrimTB(), rb.PrimTB()
	s := irtest.S(0)
	if proto == ir.LL {
		s = irtest.Packet(s)
	}
	// End a (Init 1) belongs to t0, end c to t1; a signal on one end adds to
	// the other's inbound semaphore.
	t0.Wait(a).Copy(2, irtest.I(0), irtest.Remote(s, c)).Publish().Signal(a).Flush(a).Barrier(3, 2)
	t1.Nop().Dep(0, 1).Wait(c).Copy(2, s, irtest.O(0)).Signal(c).Barrier(3, 2)
	return b.Build()
}

// FuzzRun decodes arbitrary bytes as a 1-rank op table and runs it: the
// interpreter must return (an error is fine) without panicking or hanging,
// whatever the ops, refs, dependencies and barriers say.
func FuzzRun(f *testing.F) {
	for _, p := range []*ir.Program{selfProgram(ir.Simple), selfProgram(ir.LL), irtest.PairsAllReducePrimitive(1),
		progs.AllPairs(ir.AllToAll, 1, 2, 0), progs.AllPairs(ir.Scatter, 1, 1, 0)} {
		tabs, err := optable.LowerAll(p)
		if err != nil {
			f.Fatal(err)
		}
		b, err := tabs[0].MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint16(13), uint8(0))
	}
	backoffSleep = func(time.Duration) { runtime.Gosched() }
	f.Cleanup(func() { backoffSleep = time.Sleep })
	f.Fuzz(func(t *testing.T, b []byte, count uint16, flags uint8) {
		tab, err := optable.Decode(fixTable(b))
		if err != nil || tab.NRanks != 1 {
			return
		}
		w, err := NewWorld([]*optable.Table{tab})
		if err != nil {
			return
		}
		req := Request{Count: int64(count % 4096), DataType: ir.DataType(flags % 12), RedOp: ir.RedOp(flags / 12 % 5),
			InPlace: flags&0x80 != 0 && tab.InPlace || !tab.OutOfPlace, Slices: int64(flags>>5&3) % 2, Launch: uint64(flags) + 1,
			PacketType: ir.PacketType(flags >> 6 & 1), Timeout: 2 * time.Millisecond}
		if tab.Protocol == ir.LL {
			req.Slices = 0
		}
		if s, err := launch.BufferSizes(tab, 0, req); err != nil || s.Input+s.Output+s.Scratch > 16<<20 {
			return // tables may ask for any amount of scratch; keep the fuzzer's memory small
		}
		if err := w.AllocBuffers(req); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := Run(ctx, []*optable.Table{tab}, req, w); errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the interpreter ran for 2 s: %v", err)
		}
	})
}

// fixTable sets the total size and CRC of a mutated table so that the
// fuzzer's mutations get past them to the records (and the interpreter).
func fixTable(b []byte) []byte {
	if len(b) < optable.HeaderBytes {
		return b
	}
	c := append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(c[8:], uint64(len(c)))
	binary.LittleEndian.PutUint32(c[16:], 0)
	binary.LittleEndian.PutUint32(c[16:], crc32.Checksum(c, crc32.MakeTable(crc32.Castagnoli)))
	return c
}

func TestSelfProgram(t *testing.T) {
	for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
		simAll(t, selfProgram(proto), SimOptions{DataTypes: []ir.DataType{ir.Uint8, ir.Float32}, Counts: []int64{0, 3, 100}, Launches: 3})
	}
}
