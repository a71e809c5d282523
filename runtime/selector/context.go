package selector

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/selector/vm"
)

// This file is the context reader: it tails the manifests and the value
// logs of exogenous attributes, parses every new line once, and compiles a
// schedule's expressions as soon as its entry is read (or, when they name
// attributes not declared yet, as soon as those appear). Nothing here
// decides what is visible: that is the agreed snapshot's job (snapshot.go).

// attrEntry is one line of the attribute manifest.
type attrEntry struct {
	index  int
	decl   manifest.Attribute
	ok     bool   // well-formed and the first declaration of its name
	reason string // why not ok
	log    *manifest.Tail
	// vals holds the log lines read from the current value on; earlier
	// lines can never become the value again (see valueAt).
	vals []logVal
}

// logVal is one line of an exo attribute's log.
type logVal struct {
	index      int // line index in the log
	ok         bool
	validAfter int64
	value      manifest.Value
}

// compileState of a schedule entry's expressions.
type compileState uint8

const (
	csPending  compileState = iota // names an attribute not declared (yet)
	csCompiled                     // both programs loaded
	csFailed                       // a syntax or type error: never selectable
)

// loadState of a schedule file. Transitions happen only through the agreed
// load step (Selector.load), so every rank sees the same state at the same
// request.
type loadState uint8

const (
	lsUnloaded loadState = iota
	lsLoaded
	lsMissing // the file was missing on some rank; retried at the next epoch
	lsInvalid // the file failed to load or verify on some rank: excluded for good
)

// tri is an optional boolean constraint.
type tri uint8

const (
	triAny tri = iota
	triNo
	triYes
)

func triOf(b *bool) tri {
	switch {
	case b == nil:
		return triAny
	case *b:
		return triYes
	}
	return triNo
}

func (t tri) allows() bool { return t != triNo }

// constraints restrict which requests a schedule matches (besides its
// collective and nranks).
type constraints struct {
	nlocal     int   // 0: any
	minBytes   int64 // inclusive
	maxBytes   int64 // inclusive; 0: unlimited
	inplace    tri
	outofplace tri
}

// sched is one line of the schedule manifest. Its id is its line index.
type sched struct {
	id     int
	entry  manifest.Schedule
	ok     bool   // well-formed
	reason string // why not ok / why compilation failed
	path   string

	cs        compileState
	usable    *vm.Program
	pref      *vm.Program
	attrs     []int // attribute indices the expressions read
	rankLocal bool
	// precompiled: both programs came from the entry's usable_program and
	// preference_program fields, not from compiling the text; staleLogged
	// marks the fields whose program was present but not used, logged.
	precompiled bool
	staleLogged uint8

	// A generated entry's channel count: chanProg when the manifest gives
	// an expression, else chanK; and the last communicator shape checked
	// against the generator (gen.Check), which is the only one a
	// communicator's requests have.
	chanProg *vm.Program
	chanK    int
	shape    struct {
		n, l int
		set  bool
		why  string // "" when the generator serves the shape
	}
	// failed lists the shapes a generated entry failed to build for (on
	// some rank): excluded for those shapes only.
	failed []genFailure

	ls     loadState
	info   *ScheduleInfo
	cons   constraints // the manifest's, narrowed by the file once loaded
	faults uint8       // fault kinds already logged
	// missingLogged: the file's absence was logged; it is retried every
	// epoch, and logged again only after it has loaded once.
	missingLogged bool
}

// matches reports whether the schedule's constraints admit the request.
// (The collective is matched by the snapshot's per-collective index.) A
// generated entry matches the nranks it gives, or any, when its generator
// serves the request's shape and has not failed to build for it.
func (s *sched) matches(r *Request, msg int64) bool {
	c := &s.cons
	if s.entry.Gen != nil {
		if s.entry.NRanks != 0 && s.entry.NRanks != r.NRanks || s.genWhy(r) != "" || len(s.failed) > 0 && s.failedFor(r) != "" {
			return false
		}
	} else if s.entry.NRanks != r.NRanks {
		return false
	}
	if c.nlocal != 0 && c.nlocal != r.NLocalRanks || msg < c.minBytes || c.maxBytes != 0 && msg > c.maxBytes {
		return false
	}
	if r.InPlace {
		return c.inplace.allows()
	}
	return c.outofplace.allows()
}

// genFailure is a shape a generated entry failed to build for, and why.
type genFailure struct {
	n, l int
	why  string
}

// failedFor is why the generated entry failed to build for r's shape, or "".
func (s *sched) failedFor(r *Request) string {
	for _, f := range s.failed {
		if f.n == r.NRanks && f.l == r.NLocalRanks {
			return f.why
		}
	}
	return ""
}

// loadedFor reports whether s is loaded for r: a file entry once loaded;
// a generated one when built for r's shape (a communicator has one shape;
// a tool asking for several builds each in turn).
func (s *sched) loadedFor(r *Request) bool {
	if s.ls != lsLoaded {
		return false
	}
	return s.entry.Gen == nil || s.info.NRanks == r.NRanks && (s.info.NLocalRanks == 0 || s.info.NLocalRanks == r.NLocalRanks)
}

// genWhy is "" when a generated entry's generator serves r's shape
// (nranks, and nlocalranks for the hierarchical one), else why not. The
// answer for the last shape asked is kept.
func (s *sched) genWhy(r *Request) string {
	sh := &s.shape
	if sh.set && sh.n == r.NRanks && sh.l == r.NLocalRanks {
		return sh.why
	}
	err := GenCheck(&s.entry, r.NRanks, r.NLocalRanks)
	sh.n, sh.l, sh.set, sh.why = r.NRanks, r.NLocalRanks, true, ""
	if err != nil {
		sh.why = err.Error()
	}
	return sh.why
}

// GenCheck is nil when generated entry e's generator serves a communicator
// of nranks ranks, nlocalranks per node (gen.Check: what the runtime
// matches the entry with, besides the entry's own nranks and nlocalranks
// constraints), else the generator's reason. e.Gen must be set.
func GenCheck(e *manifest.Schedule, nranks, nlocalranks int) error {
	g := e.Gen
	return gen.Check(g.Algorithm, gen.Options{Collective: e.Collective, NRanks: nranks,
		NLocalRanks: genLocal(g.Algorithm, nranks, nlocalranks), Protocol: g.Protocol, Avoid: g.Avoid})
}

// genLocal is the nlocalranks a generator is given for a communicator of n
// ranks with l per node: on several nodes (l < n) every generator, so that
// it joins the nodes with port channels or refuses (compiler/gen: across
// nodes ranks share no memory); on one node the hierarchical generator
// needs it and the others write programs for any node shape (0).
func genLocal(algo string, n, l int) int {
	if l > 0 && l < n || gen.Canonical(algo) == "hier" {
		return l
	}
	return 0
}

// mismatch explains why matches is false (Explain): every constraint the
// request fails, separated by "; ". A constraint the loaded file narrowed
// (its own message-size window, ranks per node or buffer arrangement) is
// named as the file's, since the manifest entry does not show it.
func (s *sched) mismatch(r *Request, msg int64) string {
	c, e := &s.cons, &s.entry
	switch {
	case e.Collective != r.Coll:
		return fmt.Sprintf("collective %s, request is %s", e.Collective, r.Coll)
	case e.NRanks != 0 && e.NRanks != r.NRanks:
		return fmt.Sprintf("nranks %d, request has %d", e.NRanks, r.NRanks)
	case e.Gen != nil && s.genWhy(r) != "":
		return fmt.Sprintf("generator %s does not serve %d ranks (%d per node): %s", e.Gen.Algorithm, r.NRanks, r.NLocalRanks, s.genWhy(r))
	case e.Gen != nil && s.failedFor(r) != "":
		return "excluded for this shape: " + s.failedFor(r)
	}
	whose := func(fromFile bool) string {
		if fromFile {
			return "the file's "
		}
		return ""
	}
	var why []string
	if c.nlocal != 0 && c.nlocal != r.NLocalRanks {
		why = append(why, fmt.Sprintf("%snlocalranks %d, request has %d", whose(e.NLocalRanks == 0), c.nlocal, r.NLocalRanks))
	}
	if msg < c.minBytes {
		why = append(why, fmt.Sprintf("message size %d B below %smin_bytes %d", msg, whose(c.minBytes != e.MinBytes), c.minBytes))
	}
	if c.maxBytes != 0 && msg > c.maxBytes {
		why = append(why, fmt.Sprintf("message size %d B above %smax_bytes %d", msg, whose(c.maxBytes != e.MaxBytes), c.maxBytes))
	}
	if r.InPlace && !c.inplace.allows() {
		if triOf(e.InPlace).allows() {
			why = append(why, "in-place requests not supported by the file")
		} else {
			why = append(why, "in-place requests not supported")
		}
	}
	if !r.InPlace && !c.outofplace.allows() {
		if triOf(e.OutOfPlace).allows() {
			why = append(why, "out-of-place requests not supported by the file")
		} else {
			why = append(why, "out-of-place requests not supported")
		}
	}
	return strings.Join(why, "; ")
}

// reader owns the tails and everything parsed from them.
type reader struct {
	dir       string
	mopt      manifest.Options
	log       Logger
	attrTail  *manifest.Tail
	schedTail *manifest.Tail
	attrs     []*attrEntry
	byName    map[string]*attrEntry // ok entries only
	scheds    []*sched
	pending   []*sched // csPending, retried when attributes are added
	missed    bool     // a LookupAttr failed during the current compilation
	// changes counts everything refresh added or changed (entries, log
	// lines, compilations); maxVA is the latest valid_after of any line
	// read (MinInt64 when none has one). Selector.stable uses both to skip
	// its comparisons when neither the lines nor the cut can matter.
	changes uint64
	maxVA   int64
}

func newReader(dir string, mopt manifest.Options, log Logger) *reader {
	return &reader{
		dir:       dir,
		mopt:      mopt,
		log:       log,
		attrTail:  manifest.NewTail(filepath.Join(dir, manifest.AttributeManifest)),
		schedTail: manifest.NewTail(filepath.Join(dir, manifest.ScheduleManifest)),
		byName:    map[string]*attrEntry{},
		maxVA:     math.MinInt64,
	}
}

// LookupAttr implements policy.Attrs over the declarations read so far.
func (r *reader) LookupAttr(name string) (policy.Attr, bool) {
	a, ok := r.byName[name]
	if !ok {
		r.missed = true
		return policy.Attr{}, false
	}
	return policy.Attr{Name: a.decl.Name, Type: a.decl.Type, Origin: a.decl.Origin, Path: a.decl.Path}, true
}

func (r *reader) warnDiags(ds []diag.Diagnostic) {
	for _, d := range ds {
		r.log.Warnf("selection context: %s", d)
	}
}

func firstError(ds []diag.Diagnostic) string {
	for _, d := range ds {
		if d.Severity == diag.Error {
			return d.String()
		}
	}
	return ""
}

// refresh reads everything appended since the last call: new attribute
// declarations (opening their logs), new value log lines, new schedule
// entries (compiling their expressions), and retries compilations that
// waited for attributes. A read error other than a missing file is logged;
// what was read stays valid.
func (r *reader) refresh() {
	added := false
	if err := r.attrTail.Read(func(l manifest.Line) { r.addAttr(l); added = true }); err != nil {
		r.log.Warnf("selection context: reading %s: %v", r.attrTail.Path, err)
	}
	for _, a := range r.attrs {
		if a.log != nil {
			if err := a.log.Read(func(l manifest.Line) { r.addValue(a, l) }); err != nil {
				r.log.Warnf("selection context: reading %s: %v", a.log.Path, err)
			}
		}
	}
	if added && len(r.pending) > 0 {
		still := r.pending[:0]
		for _, s := range r.pending {
			r.compile(s)
			if s.cs == csPending {
				still = append(still, s)
			}
		}
		r.pending = still
	}
	if err := r.schedTail.Read(r.addSched); err != nil {
		r.log.Warnf("selection context: reading %s: %v", r.schedTail.Path, err)
	}
}

func tooLong(file string, l manifest.Line) []diag.Diagnostic {
	return []diag.Diagnostic{manifest.TooLong(file, l.Index+1)}
}

func blank(l manifest.Line) bool { return strings.TrimSpace(string(l.Text)) == "" }

func (r *reader) addAttr(l manifest.Line) {
	r.changes++
	a := &attrEntry{index: l.Index}
	r.attrs = append(r.attrs, a)
	if blank(l) {
		a.reason = "blank line"
		return
	}
	var ds []diag.Diagnostic
	if l.TooLong {
		ds = tooLong(r.attrTail.Path, l)
	} else {
		a.decl, ds = manifest.ParseAttribute(r.attrTail.Path, l.Index+1, l.Text, r.mopt)
	}
	if msg := firstError(ds); msg != "" {
		a.reason = msg
		r.warnDiags(ds)
		return
	}
	if prev, dup := r.byName[a.decl.Name]; dup {
		a.reason = fmt.Sprintf("%s:%d: error[%s]: attribute %q is already declared by line %d; the first declaration stands",
			r.attrTail.Path, l.Index+1, diag.DuplicateID, a.decl.Name, prev.index+1)
		r.log.Warnf("selection context: %s", a.reason)
		return
	}
	a.ok = true
	r.maxVA = max(r.maxVA, a.decl.ValidAfter)
	r.byName[a.decl.Name] = a
	if a.decl.Origin == bc.Exo {
		a.log = manifest.NewTail(filepath.Join(r.dir, a.decl.Name+manifest.LogSuffix))
	}
}

func (r *reader) addValue(a *attrEntry, l manifest.Line) {
	r.changes++
	v := logVal{index: l.Index}
	if blank(l) {
		a.vals = append(a.vals, v)
		return
	}
	var ds []diag.Diagnostic
	var e manifest.ValueEntry
	if l.TooLong {
		ds = tooLong(a.log.Path, l)
	} else {
		e, ds = manifest.ParseValue(a.log.Path, l.Index+1, l.Text, a.decl.Type, r.mopt)
	}
	if firstError(ds) != "" {
		r.warnDiags(ds)
	} else {
		v.ok, v.validAfter, v.value = true, e.ValidAfter, e.Value
		r.maxVA = max(r.maxVA, e.ValidAfter)
	}
	a.vals = append(a.vals, v)
}

// srcAt is the position in a.vals and the log line index of the value of
// exo attribute a in a snapshot whose log prefix is prefix lines and whose
// clock cut is cut: the last well-formed line (in file order) among the
// first prefix lines with valid_after <= cut; pos and src are -1 for the
// default. It changes nothing. The line it picks only moves forward as
// prefix and cut grow (so does the set of lines it may pick), which is
// what lets valueAt drop the lines before it and lets the selector bound
// the snapshots of a whole range of prefixes by their two ends
// (Selector.stable).
func (a *attrEntry) srcAt(prefix int, cut int64) (pos, src int) {
	pos = -1
	for i, v := range a.vals {
		if v.index >= prefix {
			break
		}
		if v.ok && v.validAfter <= cut {
			pos = i
		}
	}
	if pos < 0 {
		return -1, -1
	}
	return pos, a.vals[pos].index
}

// valueAt returns the value of exo attribute a in a snapshot whose log
// prefix is prefix lines and whose clock cut is cut (srcAt), or the
// default; src is that line's index, or -1 for the default. As agreed
// prefixes and cuts only grow, the chosen line only moves forward, so
// lines before it are dropped.
func (a *attrEntry) valueAt(prefix int, cut int64) (manifest.Value, int) {
	best, src := a.srcAt(prefix, cut)
	if best < 0 {
		return a.decl.Default, -1
	}
	if best > 0 {
		a.vals = append(a.vals[:0], a.vals[best:]...)
	}
	return a.vals[0].value, src
}

func (r *reader) addSched(l manifest.Line) {
	r.changes++
	s := &sched{id: l.Index, ls: lsUnloaded}
	r.scheds = append(r.scheds, s)
	if blank(l) {
		s.reason = "blank line"
		return
	}
	var ds []diag.Diagnostic
	if l.TooLong {
		ds = tooLong(r.schedTail.Path, l)
	} else {
		s.entry, ds = manifest.ParseSchedule(r.schedTail.Path, l.Index+1, l.Text, r.mopt)
	}
	if msg := firstError(ds); msg != "" {
		s.reason = msg
		r.warnDiags(ds)
		return
	}
	s.ok = true
	r.maxVA = max(r.maxVA, s.entry.ValidAfter)
	switch {
	case s.entry.P2P != nil:
		s.path = s.entry.Label()
		s.ls = lsLoaded // no file: the point-to-point engine's parameters (p2p.go)
	case s.entry.Gen != nil:
		s.path = s.entry.Label()
	case filepath.IsAbs(s.entry.File):
		s.path = s.entry.File
	default:
		s.path = filepath.Join(r.dir, s.entry.File)
	}
	e := &s.entry
	s.cons = constraints{nlocal: e.NLocalRanks, minBytes: e.MinBytes, maxBytes: e.MaxBytes,
		inplace: triOf(e.InPlace), outofplace: triOf(e.OutOfPlace)}
	r.compile(s)
	if s.cs == csPending {
		r.pending = append(r.pending, s)
	}
}

// expr returns the program of one of s's expressions: its precompiled
// program (bin) when manifest.Verified accepts it against the attributes
// declared so far (pre is then true: it is what the text compiles to),
// else the compilation of the text src. A program present but unusable
// (stale, or not what its text compiles to) is logged (INFO) once per
// entry and kind, and the text's program runs.
func (r *reader) expr(s *sched, bin []byte, src, what string, opt policy.Options) (p *bc.Program, ds []diag.Diagnostic, pre bool) {
	if len(bin) > 0 {
		missed := r.missed
		prog, err := manifest.Verified(bin, src, r, opt)
		r.missed = missed // the text's compilation below decides whether s waits
		if err == nil {
			return prog, nil, true
		}
		bit := uint8(1)
		if opt.Want == policy.WantNumber {
			bit = 2
		}
		if s.staleLogged&bit == 0 {
			s.staleLogged |= bit
			r.log.Infof("selection context: schedule %d: %s_program not used (%v); compiling the text", s.id, what, err)
		}
	}
	p, ds = policy.Compile(src, r, opt)
	return p, ds, false
}

// compile compiles and links both expressions of s against the attributes
// declared so far: their precompiled programs where usable (expr).
func (r *reader) compile(s *sched) {
	r.changes++
	r.missed = false
	file := r.schedTail.Path
	u, du, pu := r.expr(s, s.entry.UsableProgram, s.entry.Usable, "usable", policy.Options{Want: policy.WantBool, File: file, Line: s.id + 1,
		Col: s.entry.UsableCol, MaxVectorLen: r.mopt.MaxVectorLen})
	p, dp, pp := r.expr(s, s.entry.PreferenceProgram, s.entry.Preference, "preference", policy.Options{Want: policy.WantNumber, File: file, Line: s.id + 1,
		Col: s.entry.PreferenceCol, MaxVectorLen: r.mopt.MaxVectorLen})
	s.precompiled = pu && pp
	ds := append(du, dp...)
	var ch *bc.Program
	if g := s.entry.Gen; g != nil {
		var dc []diag.Diagnostic
		ch, s.chanK, dc = CompileChannels(g, r, file, s.id+1, r.mopt.MaxVectorLen)
		ds = append(ds, dc...)
		if ch == nil && s.chanK == 0 {
			p = nil // the channel expression failed: so does the entry
		}
	}
	if u == nil || p == nil {
		if r.missed {
			if s.cs != csPending || s.reason == "" {
				s.reason = "waiting for an attribute to be declared: " + firstError(ds)
				r.log.Warnf("selection context: schedule %d %s", s.id, s.reason)
			}
			s.cs = csPending
			return
		}
		s.cs, s.reason = csFailed, firstError(ds)
		r.warnDiags(ds)
		return
	}
	r.warnDiags(ds) // warnings only: e.g. TS0212 rank-local
	used := map[int]bool{}
	link := func(im bc.Import) (int, error) {
		a, ok := r.byName[im.Name]
		if !ok {
			return 0, fmt.Errorf("not declared")
		}
		if a.decl.Type != im.Type || a.decl.Origin != im.Origin || im.Origin == bc.Endo && a.decl.Path != im.Path {
			return 0, fmt.Errorf("declared %s %s, program expects %s %s", a.decl.Origin, a.decl.Type, im.Origin, im.Type)
		}
		used[a.index] = true
		return a.index, nil
	}
	lu, err1 := vm.Load(u, link)
	lp, err2 := vm.Load(p, link)
	var err3 error
	if ch != nil {
		s.chanProg, err3 = vm.Load(ch, link)
	}
	if err1 != nil || err2 != nil || err3 != nil {
		s.cs, s.reason = csFailed, fmt.Sprintf("linking the expressions: %v", errors.Join(err1, err2, err3))
		r.log.Warnf("selection context: schedule %d: %s", s.id, s.reason)
		return
	}
	s.usable, s.pref = lu, lp
	s.rankLocal = u.RankLocal() || p.RankLocal()
	s.attrs = s.attrs[:0]
	for i := range used {
		s.attrs = append(s.attrs, i)
	}
	s.cs, s.reason = csCompiled, ""
}

// Contradiction reports how a loaded schedule file contradicts its
// manifest entry, for which the runtime excludes the entry for good
// (docs/selection-context.md §5.3): the file's collective or nranks differ
// from the entry's, both give nlocalranks and they differ, the entry claims
// an arrangement (inplace or outofplace true) the file lacks, or the two
// message-size windows do not overlap. field is the manifest field the
// file contradicts ("collective", "nranks", "nlocalranks", "inplace",
// "outofplace", "min_bytes", "max_bytes"); both are "" when they agree. theseusc lint
// reports the same at the entry's line.
func Contradiction(e *manifest.Schedule, info *ScheduleInfo) (field, why string) {
	switch {
	case info.Collective != e.Collective:
		return "collective", fmt.Sprintf("the file is %s %s schedule, the manifest says %s", article(info.Collective.String()), info.Collective, e.Collective)
	case e.NRanks != 0 && info.NRanks != e.NRanks:
		return "nranks", fmt.Sprintf("the file is for %d ranks, the manifest says %d", info.NRanks, e.NRanks)
	case e.NLocalRanks != 0 && info.NLocalRanks != 0 && e.NLocalRanks != info.NLocalRanks:
		return "nlocalranks", fmt.Sprintf("the file needs %d ranks per node, the manifest says %d", info.NLocalRanks, e.NLocalRanks)
	case e.InPlace != nil && *e.InPlace && !info.InPlace:
		return "inplace", "the manifest claims in-place support the file lacks"
	case e.OutOfPlace != nil && *e.OutOfPlace && !info.OutOfPlace:
		return "outofplace", "the manifest claims out-of-place support the file lacks"
	}
	hi := func(m int64) int64 {
		if m == 0 {
			return math.MaxInt64
		}
		return m
	}
	if max(e.MinBytes, info.MinBytes) > min(hi(e.MaxBytes), hi(info.MaxBytes)) {
		field = "min_bytes"
		if e.MaxBytes != 0 && info.MinBytes > e.MaxBytes {
			field = "max_bytes"
		}
		return field, fmt.Sprintf("the manifest's window [%d, %d] and the file's [%d, %d] do not overlap", e.MinBytes, e.MaxBytes, info.MinBytes, info.MaxBytes)
	}
	return "", ""
}

// article is "an" before a word that starts with a vowel (allreduce,
// allgather, alltoall), else "a".
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiouAEIOU", rune(word[0])) {
		return "an"
	}
	return "a"
}

// narrow intersects the manifest's constraints with the loaded file's and
// returns why they contradict (Contradiction), or "".
func (s *sched) narrow(info *ScheduleInfo) string {
	if _, why := Contradiction(&s.entry, info); why != "" {
		return why
	}
	c := s.cons
	if c.nlocal == 0 {
		c.nlocal = info.NLocalRanks
	}
	c.minBytes = max(c.minBytes, info.MinBytes)
	hi := func(m int64) int64 {
		if m == 0 {
			return math.MaxInt64
		}
		return m
	}
	c.maxBytes = min(hi(c.maxBytes), hi(info.MaxBytes))
	if c.maxBytes == math.MaxInt64 {
		c.maxBytes = 0
	}
	if !info.InPlace {
		c.inplace = triNo
	}
	if !info.OutOfPlace {
		c.outofplace = triNo
	}
	s.cons = c
	return ""
}

// CompileChannels compiles a generated entry's channel count ("channels",
// docs/selection-context.md §5.1): an integer literal gives k (prog nil),
// an expression its program, which may read only the request's nranks and
// nlocalranks (a schedule is built once per communicator, so its shape is
// all it can depend on); absent, k = 1. prog nil and k 0: an error (or,
// with the diagnostics of a missing attribute, pending), reported in ds.
// theseusc lint applies the same rules.
func CompileChannels(g *manifest.Generator, attrs policy.Attrs, file string, line, maxVec int) (prog *bc.Program, k int, ds []diag.Diagnostic) {
	if g.Channels == "" {
		return nil, 1, nil
	}
	if v, err := strconv.Atoi(g.Channels); err == nil {
		return nil, v, nil // the manifest checked its range
	}
	p, ds := policy.Compile(g.Channels, attrs, policy.Options{Want: policy.WantNumber, What: "a channels expression", File: file, Line: line,
		Col: g.ChannelsCol, MaxVectorLen: maxVec})
	if p == nil {
		return nil, 0, ds
	}
	for _, im := range p.Imports {
		if im.Origin != bc.Endo || im.Path != bc.ReqNRanks && im.Path != bc.ReqNLocalRanks {
			ds = append(ds, diag.Diagnostic{Code: diag.BadValue, Severity: diag.Error, File: file, Line: line, Col: g.ChannelsCol,
				Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf("channels reads %q; it may read only request.nranks and request.nlocalranks", im.Name),
				Hint: "a generated schedule is built once per communicator: its channel count can depend on its shape only"})
			return nil, 0, ds
		}
	}
	return p, 0, ds
}

// ChannelsAt is the channel count generated entry g asks for on a
// communicator of nranks ranks, nlocal per node, as the runtime computes it
// when it builds the schedule: the literal k, or CompileChannels' program
// prog evaluated there and clamped to [1, gen.MaxChannels]. Errors: the
// expression faults there (a division by zero, an out-of-range shift) or
// is NaN: the runtime excludes the entry for such communicators. theseusc
// lint and the context daemon's checks use it.
func ChannelsAt(g *manifest.Generator, prog *bc.Program, k, nranks, nlocal int) (int, error) {
	if prog == nil {
		return k, nil
	}
	p, err := vm.Load(prog, func(bc.Import) (int, error) { return 0, nil }) // CompileChannels admits endo imports only
	if err != nil {
		return 0, fmt.Errorf("channels: %w", err)
	}
	var env vm.Env
	env.Req[bc.ReqNRanks], env.Req[bc.ReqNLocalRanks] = int64(nranks), int64(nlocal)
	var m vm.VM
	return evalChannels(&m, p, &env, g.Channels)
}

// evalChannels evaluates a generated entry's channel program p (source
// expr) against env: its value floored and clamped to [1,
// gen.MaxChannels].
func evalChannels(m *vm.VM, p *vm.Program, env *vm.Env, expr string) (int, error) {
	v, f := m.Eval(p, env)
	if !f.OK() {
		return 0, fmt.Errorf("channels: %s", f.Describe(p))
	}
	x := v.Number()
	if x != x {
		return 0, fmt.Errorf("channels: %q is NaN", expr)
	}
	return int(max(1, min(math.Floor(x), gen.MaxChannels))), nil
}

func (r *reader) close() {
	r.attrTail.Close()
	r.schedTail.Close()
	for _, a := range r.attrs {
		if a.log != nil {
			a.log.Close()
		}
	}
}
