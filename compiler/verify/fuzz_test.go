package verify_test

import (
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	. "github.com/theseus-ccl/theseus/ir/irtest"
)

// fuzzBases are the programs FuzzVerify mutates: valid ones, so that
// mutations reach every check, not only the structural ones.
var fuzzBases = []func() *ir.Program{
	func() *ir.Program { return RingAllReduce(3, ir.Simple) },
	func() *ir.Program { return RingAllReduce(3, ir.LL) },
	func() *ir.Program { return PairsAllReducePrimitive(3) },
	func() *ir.Program { return AllGatherRing(3) },
	func() *ir.Program { return llPairs(2).Build() },
	func() *ir.Program { return primRing(3).Build() },
	func() *ir.Program { return mailbox(true).Build() },
	func() *ir.Program { return twoRanks().Build() },
	func() *ir.Program { return transfer2().Build() },
	func() *ir.Program {
		b := copy1()
		b.Rank(0).PrimTB().Barrier(0, 2).Nop().Publish()
		b.Rank(0).PrimTB().Barrier(0, 2).Nop().Dep(1, 1)
		return b.Build()
	},
}

// fuzzVals are the values a mutation byte can stand for.
var fuzzVals = []int64{-2, -1, 0, 1, 2, 3, 4, 5, 7, 8, 128, 1 << 24, 1 << 31, 1 << 40, math.MaxInt64, math.MinInt64}

// fuzzProgram builds a program from data: data[0] picks a base, every
// following 5 bytes (kind, a, b, c, v) edit it.
func fuzzProgram(data []byte) (*ir.Program, verify.Options) {
	var opts verify.Options
	if len(data) == 0 {
		return fuzzBases[0](), opts
	}
	p := fuzzBases[int(data[0])%len(fuzzBases)]()
	opts.Level = ir.Level(data[0] / 32 % 3)
	for data = data[1:]; len(data) >= 5; data = data[5:] {
		mutateProgram(p, data[0], int(data[1]), int(data[2]), int(data[3]), data[4])
	}
	return p, opts
}

func mutateProgram(p *ir.Program, kind byte, a, b, c int, v byte) {
	val := fuzzVals[int(v)%len(fuzzVals)]
	small := int(v%8) - 2
	if len(p.Ranks) == 0 {
		return
	}
	rk := &p.Ranks[a%len(p.Ranks)]
	switch kind % 20 {
	case 0:
		p.NRanks = int(val % 70000)
	case 1:
		p.ChunksPerBlock = val
	case 2:
		p.Collective = ir.Collective(v % 12)
	case 3:
		p.Protocol = ir.Protocol(v % 3)
	case 4:
		p.Root = small
		p.InPlace, p.OutOfPlace = v&1 != 0, v&2 != 0
	case 5:
		p.MinBytes, p.MaxBytes, p.NumThreads, p.NLocalRanks = val, fuzzVals[b%len(fuzzVals)], int(val%5000), small
	case 6:
		rk.Chunks[b%3] = val
	case 7:
		if len(rk.Channels) > 0 {
			ch := &rk.Channels[b%len(rk.Channels)]
			switch c % 4 {
			case 0:
				ch.Peer = small
			case 1:
				ch.PeerChannel = small
			case 2:
				ch.Init = val
			case 3:
				ch.Type = ir.ChannelType(v % 3)
			}
		}
	case 8:
		rk.Channels = append(rk.Channels, ir.Channel{Peer: small, PeerChannel: int(v % 4)})
	case 9:
		if len(rk.TBs) > 0 {
			tb := &rk.TBs[b%len(rk.TBs)]
			switch c % 3 {
			case 0:
				tb.SendPeer = small
			case 1:
				tb.RecvPeer = small
			case 2:
				tb.Chan = small
			}
		}
	case 10:
		if len(rk.TBs) > 0 {
			src := rk.TBs[b%len(rk.TBs)]
			tb := ir.Threadblock{SendPeer: src.SendPeer, RecvPeer: src.RecvPeer, Chan: src.Chan}
			for _, op := range src.Ops {
				tb.Ops = append(tb.Ops, op.Clone())
			}
			rk.TBs = append(rk.TBs, tb)
		}
	default:
		if len(rk.TBs) == 0 {
			return
		}
		tb := &rk.TBs[b%len(rk.TBs)]
		if len(tb.Ops) == 0 {
			return
		}
		i := c % len(tb.Ops)
		op := &tb.Ops[i]
		refs := &op.Srcs
		if v&1 != 0 {
			refs = &op.Dsts
		}
		var ref *ir.Ref
		if len(*refs) > 0 {
			ref = &(*refs)[int(v/2)%len(*refs)]
		}
		switch kind % 20 {
		case 11:
			op.Code = ir.Opcode(v % (uint8(ir.NumOpcodes) + 2))
		case 12:
			op.Count = val
		case 13:
			if ref != nil {
				ref.Off = val
			}
		case 14:
			if ref != nil {
				ref.Buf, ref.Chan, ref.Packet = ir.BufKind(b%4), small, c&1 != 0
			}
		case 15:
			op.Chans = append(op.Chans, small)
		case 16:
			op.Deps = append(op.Deps, ir.Dep{TB: small, Step: int(v % 8)})
			op.Publish = c&1 != 0
		case 17:
			op.Barrier, op.BarrierTBs = small, int(v%4)
		case 18:
			j := int(v) % len(tb.Ops)
			tb.Ops[i], tb.Ops[j] = tb.Ops[j], tb.Ops[i]
		case 19:
			if v&1 != 0 {
				tb.Ops = slices.Delete(tb.Ops, i, i+1)
			} else {
				tb.Ops = slices.Insert(tb.Ops, i, op.Clone())
			}
		}
	}
}

// FuzzVerify: on any program, Verify returns (no panic, no hang), gives
// the same answer twice, and every diagnostic has a code it documents, a
// message and (unless a note) a hint.
func FuzzVerify(f *testing.F) {
	for i := range fuzzBases {
		f.Add([]byte{byte(i)})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			return
		}
		p, opts := fuzzProgram(data)
		ds := verify.Verify(p, opts)
		codes := verify.Codes()
		for _, d := range ds {
			if d.Msg == "" || (d.Severity != diag.Note && (d.Hint == "" || !slices.Contains(codes, d.Code))) {
				t.Errorf("malformed diagnostic %+v", d)
			}
		}
		if d := cmp.Diff(ds, verify.Verify(p, opts)); d != "" {
			t.Errorf("not deterministic:\n%s", d)
		}
	})
}
