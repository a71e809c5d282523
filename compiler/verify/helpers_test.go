package verify_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	. "github.com/theseus-ccl/theseus/ir/irtest"
)

// testFile is the Program.File of every placed program.
const testFile = "t.sched"

// place gives every element of p a distinct synthetic position, so tests
// can check that a diagnostic points at the right one:
//
//	program        1:1
//	rank r         L(r):1             L(r) = 100000*(r+1)
//	channel ch     L(r)+1+ch:2
//	tb t           L(r)+10000*(t+1):3
//	op s of tb t   L(r)+10000*(t+1)+1+s:4
func place(p *ir.Program) *ir.Program {
	p.File = testFile
	p.Pos = ir.Pos{Line: 1, Col: 1}
	for r := range p.Ranks {
		rk := &p.Ranks[r]
		rk.Pos = rankPos(r)
		for ch := range rk.Channels {
			rk.Channels[ch].Pos = chanPos(r, ch)
		}
		for t := range rk.TBs {
			rk.TBs[t].Pos = tbPos(r, t)
			for s := range rk.TBs[t].Ops {
				rk.TBs[t].Ops[s].Pos = opPos(r, t, s)
			}
		}
	}
	return p
}

func rankPos(r int) ir.Pos     { return ir.Pos{Line: int32(100000 * (r + 1)), Col: 1} }
func chanPos(r, ch int) ir.Pos { return ir.Pos{Line: rankPos(r).Line + 1 + int32(ch), Col: 2} }
func tbPos(r, t int) ir.Pos    { return ir.Pos{Line: rankPos(r).Line + 10000*int32(t+1), Col: 3} }
func opPos(r, t, s int) ir.Pos { return ir.Pos{Line: tbPos(r, t).Line + 1 + int32(s), Col: 4} }

var progPos = ir.Pos{Line: 1, Col: 1}

// finding is the part of a diagnostic the tests compare exactly.
type finding struct {
	Code      diag.Code
	Severity  diag.Severity
	Rank      int
	TB        int
	Step      int
	Line, Col int
}

// at builds the expected finding of an error about (r, t, s) at pos.
func at(code diag.Code, r, t, s int, pos ir.Pos) finding {
	return finding{Code: code, Severity: diag.Error, Rank: r, TB: t, Step: s, Line: int(pos.Line), Col: int(pos.Col)}
}

// warn is at for a warning.
func warn(code diag.Code, r, t, s int, pos ir.Pos) finding {
	f := at(code, r, t, s, pos)
	f.Severity = diag.Warning
	return f
}

func findings(ds []diag.Diagnostic) []finding {
	var fs []finding
	for _, d := range ds {
		fs = append(fs, finding{d.Code, d.Severity, d.Rank, d.TB, d.Step, d.Line, d.Col})
	}
	return fs
}

// verifyPlaced places p, verifies it and checks the common promises of
// every diagnostic: the file, a hint, a message.
func verifyPlaced(t *testing.T, p *ir.Program, opts verify.Options) []diag.Diagnostic {
	t.Helper()
	ds := verify.Verify(place(p), opts)
	for _, d := range ds {
		if d.Severity == diag.Note {
			continue
		}
		if d.File != testFile || d.Hint == "" || d.Msg == "" || d.Line == 0 {
			t.Errorf("diagnostic without file, position, hint or message: %+v", d)
		}
	}
	return ds
}

// wantFindings checks that ds is exactly want (in order).
func wantFindings(t *testing.T, ds []diag.Diagnostic, want ...finding) {
	t.Helper()
	if d := cmp.Diff(want, findings(ds)); d != "" {
		t.Errorf("findings (-want +got):\n%s\nall:\n%s", d, dump(ds))
	}
}

// wantMsg checks that the first diagnostic of code says every part.
func wantMsg(t *testing.T, ds []diag.Diagnostic, code diag.Code, parts ...string) {
	t.Helper()
	for _, d := range ds {
		if d.Code != code {
			continue
		}
		for _, part := range parts {
			if !strings.Contains(d.Msg, part) {
				t.Errorf("%s message %q lacks %q", code, d.Msg, part)
			}
		}
		return
	}
	t.Errorf("no %s among:\n%s", code, dump(ds))
}

func dump(ds []diag.Diagnostic) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "  %v\n", d)
	}
	return b.String()
}

// clean checks that p verifies without any diagnostic.
func clean(t *testing.T, p *ir.Program, opts verify.Options) {
	t.Helper()
	if ds := verify.Verify(p, opts); len(ds) > 0 {
		t.Errorf("%s: want no diagnostics, got:\n%s", p.Name, dump(ds))
	}
}

// copy1 is the smallest correct program: allreduce on one rank, one chunk.
func copy1() *Builder {
	b := New(ir.AllReduce, 1, 1)
	b.Rank(0).Chunks(1, 1, 0).PrimTB().Copy(1, I(0), O(0))
	return b
}

// mailbox is irtest.Mailbox.
func mailbox(credit bool) *Builder { return Mailbox(credit) }

// llPairs is a one-shot allreduce on n ranks in the LL protocol: rank r
// writes its whole input as packets into slot r of every peer's scratch
// (n slots of C = n chunks), then reduces its input with the packets of
// every peer into its output. No semaphores: the packet flags order it.
func llPairs(n int) *Builder {
	C := int64(n)
	b := New(ir.AllReduce, n, C).Name("ll_pairs").Protocol(ir.LL).Arrangements(false, true)
	for r := 0; r < n; r++ {
		b.Rank(r).Chunks(C, C, int64(n)*C)
	}
	ch := make([][]int, n)
	for r := range ch {
		ch[r] = make([]int, n)
	}
	for r := 0; r < n; r++ {
		for q := r + 1; q < n; q++ {
			ch[r][q], ch[q][r] = b.Connect(r, q, ir.MemoryChannel, 0, 0)
		}
	}
	for r := 0; r < n; r++ {
		tb := b.Rank(r).PrimTB()
		for q := 0; q < n; q++ {
			if q != r {
				tb.Copy(C, I(0), Packet(Remote(S(int64(r)*C), ch[r][q])))
			}
		}
		for j := int64(0); j < C; j++ {
			srcs := []ir.Ref{I(j)}
			for q := 0; q < n; q++ {
				if q != r {
					srcs = append(srcs, Packet(S(int64(q)*C+j)))
				}
			}
			tb.Reduce(1, srcs, O(j))
		}
	}
	return b
}

// primRing is the ring allreduce of RingAllReduce written directly at the
// primitive level with credits, as ir.md §7 legalises it (Simple protocol,
// one slot per transfer): channel 0 of rank r sends to r+1 (init T credits),
// channel 1 receives from r-1, and rank r's scratch holds the T = 2n-2
// slots its predecessor writes.
func primRing(n int) *Builder {
	C := int64(n)
	T := int64(2*n - 2)
	b := New(ir.AllReduce, n, C).Name(fmt.Sprintf("prim_ring_%d", n)).Arrangements(true, true)
	for r := 0; r < n; r++ {
		b.Rank(r).Chunks(C, C, T)
	}
	for r := 0; r < n; r++ {
		rk := &b.Program().Ranks[r]
		rk.Channels = []ir.Channel{{Peer: (r + 1) % n, PeerChannel: 1, Init: T}, {Peer: (r + n - 1) % n, PeerChannel: 0}}
	}
	mod := func(a int) int64 { return int64(((a % n) + n) % n) }
	for r := 0; r < n; r++ {
		tb := b.Rank(r).PrimTB()
		in, out := int64(0), int64(0) // transfer indices
		next := func() ir.Ref { out++; return Remote(S(out-1), 0) }
		slot := func() ir.Ref { in++; return S(in - 1) }
		tb.Wait(0).Copy(1, I(mod(r)), next()).Signal(0)
		for k := 1; k <= n-2; k++ {
			tb.Wait(1, 0).Reduce(1, []ir.Ref{I(mod(r - k)), slot()}, next()).Signal(0, 1)
		}
		c := mod(r + 1)
		tb.Wait(1, 0).Reduce(1, []ir.Ref{I(c), slot()}, O(c), next()).Signal(0, 1)
		for j := 0; j <= n-3; j++ {
			tb.Wait(1, 0).Copy(1, slot(), O(mod(r-j)), next()).Signal(0, 1)
		}
		tb.Wait(1).Copy(1, slot(), O(mod(r+2))).Signal(1)
	}
	return b
}
