// Package verify proves a schedule before it is published, lowered or run:
// its structure (indices, full chunk ranges, channel pairing, limits), its
// synchronisation (transfer pairing, signal/wait balance, dependencies), its
// freedom from deadlock and data races, that a rank's input and output are
// reached by its peers only within its launch (after it starts, before it
// completes), and that it computes its collective on every rank in every
// buffer arrangement it supports. The rules are those
// of docs/design/ir.md §5–6; docs/verification.md describes each check, its
// algorithm and its cost, and docs/diagnostics.md lists the codes.
//
// Verify works on programs at the transfer level, the primitive level or a
// mix of both, so the pass pipeline can run it after every pass. Rooted
// programs are verified for the request root Program.Root (every other root
// is the same program with ranks rotated, ir.md §3).
package verify

import (
	"fmt"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Checks is a set of verifier checks.
type Checks uint8

// The checks, in the order they run. Each needs the ones before it: when a
// check finds errors, or is skipped, the checks after it that need it do not
// run.
const (
	// CheckStructure: ranks, buffers, channels, threadblocks, ops, refs,
	// barriers, dependencies and limits (TS01xx, TS0202, TS0203). It always
	// runs; Skip ignores it.
	CheckStructure Checks = 1 << iota
	// CheckSync: transfer pairing (TS0200), signal/wait balance per channel
	// end and iteration (TS0201), one threadblock per channel end (TS0213)
	// and LL packet slots written once per launch (TS0209).
	CheckSync
	// CheckDeadlock: the happens-before graph over two iterations is acyclic
	// and every wait is satisfied (TS0204).
	CheckDeadlock
	// CheckRaces: conflicting accesses are ordered (TS0205, TS0206), and
	// every access by a peer to a rank's input or output lies inside that
	// rank's launch: after its start (TS0215) and before its completion
	// (TS0214).
	CheckRaces
	// CheckSemantics: symbolic execution proves the collective's
	// postcondition (TS0207, TS0208, TS0210, TS0211).
	CheckSemantics

	// AllChecks is every check.
	AllChecks = CheckStructure | CheckSync | CheckDeadlock | CheckRaces | CheckSemantics
	// Cheap is the set the pass pipeline can afford between passes: linear
	// in the ops, no happens-before order. Use Options{Skip: ^verify.Cheap}.
	Cheap = CheckStructure | CheckSync
)

// Options tune Verify. The zero value runs every check.
type Options struct {
	// Skip removes checks (CheckStructure cannot be skipped). Skipping
	// CheckSync skips everything after it. With CheckDeadlock skipped the
	// happens-before order is still computed for races and semantics; a
	// program that does not run to completion then gets one TS0204 error
	// without the cycle analysis.
	Skip Checks
	// Level is the op level the program must be at: ir.LevelBoth (the zero
	// value) accepts any mix; ir.LevelPrimitive rejects transfer ops (after
	// legalisation); ir.LevelTransfer rejects signal, wait, flush, barrier,
	// remote and packet refs (MSCCL XML programs). Violations are TS0108.
	Level ir.Level
	// MaxErrors caps the errors reported, and separately the warnings of
	// each code (0: diag.DefaultMax). One note per code says how many were
	// left out.
	MaxErrors int
}

// Verify checks p and returns its diagnostics sorted by position (see
// diag.Sort); an empty result means p is proven. Errors mean p must not be
// published or run; warnings (TS0206, TS0211, TS0114 for a root on a
// non-rooted collective) do not. Every diagnostic carries Program.File and
// the position of the op, threadblock, channel or rank it is about, the
// rank/threadblock/step (-1 when not about one), a stable code and a hint.
//
// Verify never modifies p and never panics. Its cost is near-linear in the
// ops and chunks touched (docs/verification.md); programs over the limits in
// limits.go get TS0110 and only the structural checks.
func Verify(p *ir.Program, opts Options) []diag.Diagnostic {
	c := newChecker(p, opts)
	c.run()
	return c.rep.finish()
}

// Codes lists the diagnostic codes Verify reports, in code order
// (docs/verification.md describes when).
func Codes() []diag.Code {
	return []diag.Code{
		diag.BadValue, diag.UnknownOp, diag.UnknownCollective,
		diag.BadRank, diag.BadChannel, diag.ChannelPairing, diag.ChunkRange, diag.BadCount,
		diag.MissingBuffer, diag.BadRef, diag.WrongLevel, diag.BadGeometry, diag.Limits, diag.BadPeer,
		diag.BadBarrier, diag.BadWindow, diag.BadRoot, diag.NoArrangement,
		diag.TransferMismatch, diag.SignalWait, diag.DepNotPublished, diag.BadDep, diag.Deadlock,
		diag.Race, diag.RaceAcrossLaunch, diag.Postcondition, diag.DoubleReduce, diag.PacketReuse,
		diag.UninitRead, diag.Unverifiable, diag.SharedChannel, diag.PeerAccessLate, diag.PeerAccessEarly,
	}
}

// HasErrors reports whether ds holds a diagnostic of severity Error.
func HasErrors(ds []diag.Diagnostic) bool {
	for i := range ds {
		if ds[i].Severity == diag.Error {
			return true
		}
	}
	return false
}

func (c *checker) run() {
	if c.p == nil {
		c.rep.add(diag.Diagnostic{Code: diag.BadRank, Severity: diag.Error, Rank: -1, TB: -1, Step: -1,
			Msg: "no program", Hint: hintOf(diag.BadRank)})
		return
	}
	if !c.structure() || c.rep.nerr > 0 {
		return
	}
	if c.opts.Skip&CheckSync != 0 {
		return
	}
	races := c.opts.Skip&CheckRaces == 0
	sem := c.opts.Skip&CheckSemantics == 0
	c.wantCrefs = races || sem
	c.sync()
	if c.rep.nerr > 0 {
		return
	}
	wantOrder := c.opts.Skip&(CheckDeadlock|CheckRaces|CheckSemantics) != CheckDeadlock|CheckRaces|CheckSemantics
	if !wantOrder {
		return
	}
	// LL programs are never sliced: their iterations are launches (ir.md
	// §4, §5.4). Simple programs are modelled over two slices.
	launch := c.p.Protocol == ir.LL
	c.buildNodeIndex()
	// The checkers of races and semantics ride along with the simulation,
	// one per buffer arrangement, in its topological order. Scratch is never
	// aliased, so its races are the same in every arrangement: the first
	// checker alone looks at them.
	var cks []*replayer
	if races || sem {
		for i, inPlace := range c.arrangements() {
			cks = append(cks, c.newReplayer(replayMode{sem: sem, inPlace: inPlace, raceUser: races,
				raceScratch: races && i == 0 && c.hasScratch, tagUser: !launch, tagScratch: launch}))
		}
		// Peer accesses to user buffers lie inside their owner's launch
		// (owner.go); the answer is the same in every arrangement.
		if races && c.remoteUser {
			cks[0].own = c.newOwnerState(c.buildOwners())
		}
	}
	sc := c.simulate(launch, cks)
	if !sc.complete() {
		c.reportDeadlocks(sc, c.opts.Skip&CheckDeadlock != 0)
		return
	}
	if sem && c.p.Collective == ir.Custom {
		c.report(diag.Unverifiable, diag.Warning, -1, -1, -1,
			"custom collective %q: there is no postcondition to prove; structure, synchronisation, deadlock, races and reads of undefined chunks are still checked", c.p.Name)
	}
	c.finish(cks)
	// Between the slices of one launch, user-buffer pieces differ, so
	// cross-iteration races there are on scratch only. Across launches the
	// pieces are the same, and each rank's kernel follows its previous one
	// (a per-rank fence), so a rank's own accesses are ordered; a peer's
	// access to its user buffers lies inside its launch (TS0214, TS0215:
	// owner.go), which the fence then orders against the neighbouring
	// launches. No separate model of launches is needed.
}

// arrangements lists the buffer arrangements to prove: out of place first,
// then in place, as the program supports them. A custom collective's
// buffers never alias, so its two arrangements are one.
func (c *checker) arrangements() []bool {
	var a []bool
	if c.p.OutOfPlace {
		a = append(a, false)
	}
	if c.p.InPlace && (len(a) == 0 || c.p.Collective != ir.Custom) {
		a = append(a, true)
	}
	return a
}

// checker holds the state of one Verify call.
type checker struct {
	p    *ir.Program
	opts Options
	rep  reporter

	n    int
	C    int64
	root int  // request root the program is verified for (rooted collectives)
	ll   bool // LL protocol: iterations are launches, no transfer credits

	// From structure: per rank, the chunks of each buffer and whether it
	// exists there (physical = logical, since the request root is
	// Program.Root).
	size       [][ir.NumBufKinds]int64
	exists     [][ir.NumBufKinds]bool
	remoteUser bool  // some ref reaches a peer's input or output
	combines   int64 // chunk combinations per iteration (reduces), to size the set arena
	hasPacket  bool
	levelMixed bool

	opk        []uint8 // per op (global order): opcode and flags, see opKind
	refAt      []int32 // per op: index of its header in crefs (data ops only)
	crefs      []cref  // compact refs of the data ops, see cref
	tbDirs     []uint8 // per threadblock (global order): bit 0 sends, bit 1 receives
	tbSendN    []int32 // per threadblock: its sends per iteration
	tbRecvN    []int32 // ... and receives
	endBase    []int32 // global index of rank r's first channel end; len n+1
	endPeer    []int32 // per channel end: the rank at its other end
	endWaitN   []int32 // per channel end: waits on it per iteration
	endSigN    []int32 // ... and signals
	nord       int     // entries of ord
	ncrefs     int     // entries of crefs
	wantCrefs  bool    // build crefs (races or semantics are checked)
	hasScratch bool

	// From sync.
	tbs      []tbInfo
	rankTB   []int32 // global index of rank r's first threadblock; len n+1
	ends     []endInfo
	conns    []connInfo
	bars     []barInfo
	ordOff   []int32 // per op (global op index), offset into ord; len ops+1
	ord      []int32 // per-op ordinals, see sync.go
	scrBase  []int64 // per rank, offset of its scratch in pktWriter; len n+1
	pktW     []int32 // per scratch chunk: global tb of its packet writer, -1
	pktS     []int32 // ... and its step
	numNodes int32

	sc *schedule // the simulation running (its positions bound the checkers' searches)

	why    string  // what crossPreds found missing (simulation only)
	nodeTB []int32 // hb.go: node>>nodeShift → threadblock
}

func newChecker(p *ir.Program, opts Options) *checker {
	max := opts.MaxErrors
	if max <= 0 {
		max = diag.DefaultMax
	}
	c := &checker{p: p, opts: opts}
	c.rep.max = max
	if p != nil {
		c.rep.file = p.File
	}
	return c
}

// reporter collects diagnostics under the caps of Options.MaxErrors.
type reporter struct {
	file    string
	max     int
	nerr    int
	items   []diag.Diagnostic
	perCode map[diag.Code]int
	dropped map[diag.Code]int
	order   []diag.Code // codes in the order they were first dropped
}

// room reports whether another diagnostic of code could still be kept.
func (r *reporter) room(code diag.Code) bool {
	if r.nerr >= r.max {
		// errors are capped in total; warnings per code
		return sevOf(code) != diag.Error && r.perCode[code] < r.max
	}
	return r.perCode[code] < r.max
}

func (r *reporter) add(d diag.Diagnostic) {
	if r.perCode == nil {
		r.perCode = map[diag.Code]int{}
	}
	if (d.Severity == diag.Error && r.nerr >= r.max) || r.perCode[d.Code] >= r.max {
		if r.dropped == nil {
			r.dropped = map[diag.Code]int{}
		}
		if r.dropped[d.Code] == 0 {
			r.order = append(r.order, d.Code)
		}
		r.dropped[d.Code]++
		if d.Severity == diag.Error {
			r.nerr++ // still counts: the program has errors
		}
		return
	}
	if d.Severity == diag.Error {
		r.nerr++
	}
	r.perCode[d.Code]++
	r.items = append(r.items, d)
}

// drop counts n diagnostics of code that were found but not built (over
// the cap), for the note of finish.
func (r *reporter) drop(code diag.Code, n int) {
	if n <= 0 {
		return
	}
	if r.dropped == nil {
		r.dropped = map[diag.Code]int{}
	}
	if r.dropped[code] == 0 {
		r.order = append(r.order, code)
	}
	r.dropped[code] += n
	if sevOf(code) == diag.Error {
		r.nerr += n
	}
}

func (r *reporter) finish() []diag.Diagnostic {
	diag.Sort(r.items)
	for _, code := range r.order {
		r.items = append(r.items, diag.Diagnostic{Code: code, Severity: diag.Note, File: r.file,
			Rank: -1, TB: -1, Step: -1,
			Msg:  fmt.Sprintf("%d more %s diagnostics not shown", r.dropped[code], code),
			Hint: "fix the ones shown, or raise the limit (--max-errors)"})
	}
	return r.items
}

// sevOf is the severity Verify gives a code.
func sevOf(code diag.Code) diag.Severity {
	switch code {
	case diag.RaceAcrossLaunch, diag.Unverifiable:
		return diag.Warning
	}
	return diag.Error
}

var hints = func() map[diag.Code]string {
	m := make(map[diag.Code]string, len(diag.Codes))
	for _, ci := range diag.Codes {
		m[ci.Code] = ci.Hint
	}
	return m
}()

func hintOf(code diag.Code) string { return hints[code] }

// pos finds the most precise known position for (rank, tb, step): the op's,
// else the threadblock's, else the rank's, else the program's. Indices out
// of range fall back to the enclosing element.
func (c *checker) pos(r, t, s int) ir.Pos {
	p := c.p
	if r >= 0 && r < len(p.Ranks) {
		rk := &p.Ranks[r]
		if t >= 0 && t < len(rk.TBs) {
			tb := &rk.TBs[t]
			if s >= 0 && s < len(tb.Ops) && tb.Ops[s].Pos.IsValid() {
				return tb.Ops[s].Pos
			}
			if tb.Pos.IsValid() {
				return tb.Pos
			}
		}
		if rk.Pos.IsValid() {
			return rk.Pos
		}
	}
	return p.Pos
}

// chanPos is the position of channel ch of rank r (else the rank's).
func (c *checker) chanPos(r, ch int) ir.Pos {
	if r >= 0 && r < len(c.p.Ranks) {
		rk := &c.p.Ranks[r]
		if ch >= 0 && ch < len(rk.Channels) && rk.Channels[ch].Pos.IsValid() {
			return rk.Channels[ch].Pos
		}
	}
	return c.pos(r, -1, -1)
}

// report adds a diagnostic about (rank, tb, step) at its position.
func (c *checker) report(code diag.Code, sev diag.Severity, r, t, s int, format string, args ...any) {
	c.reportAt(code, sev, c.pos(r, t, s), r, t, s, "", format, args...)
}

// reportAt adds a diagnostic at an explicit position, with a hint ("" for
// the code's default).
func (c *checker) reportAt(code diag.Code, sev diag.Severity, at ir.Pos, r, t, s int, hint, format string, args ...any) {
	c.rep.add(c.mkDiag(code, sev, at, r, t, s, hint, format, args...))
}

// mkDiag builds a diagnostic (hint "" for the code's default).
func (c *checker) mkDiag(code diag.Code, sev diag.Severity, at ir.Pos, r, t, s int, hint, format string, args ...any) diag.Diagnostic {
	if hint == "" {
		hint = hintOf(code)
	}
	return diag.Diagnostic{Code: code, Severity: sev, File: c.p.File, Line: int(at.Line), Col: int(at.Col),
		Rank: r, TB: t, Step: s, Msg: fmt.Sprintf(format, args...), Hint: hint}
}

func (c *checker) errf(code diag.Code, r, t, s int, format string, args ...any) {
	c.report(code, diag.Error, r, t, s, format, args...)
}

// opName describes step s of threadblock t on rank r, e.g. "rank 1 tb 0 step 3 (wait)".
func (c *checker) opName(r, t, s int) string {
	op := &c.p.Ranks[r].TBs[t].Ops[s]
	return fmt.Sprintf("rank %d tb %d step %d (%s)", r, t, s, op.Code)
}
