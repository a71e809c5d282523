package nccltests

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// MaxInputBytes bounds what ParseFile reads: 64 MiB, far more than any
// nccl-tests output (a row is about 120 bytes).
const MaxInputBytes = 64 << 20

// MaxErrors is how many errors Parse collects before it stops.
const MaxErrors = 10

// Error is a problem at a position of the input.
type Error struct {
	File string
	// Line and Col are 1-based; Col counts bytes.
	Line, Col int
	Msg       string
	// Hint is a one-line suggestion; "" when there is none.
	Hint string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	if e.Hint != "" {
		s += " (hint: " + e.Hint + ")"
	}
	return s
}

// ErrorList is the errors of one parse, in input order; at most MaxErrors
// of them, then one saying the parse stopped.
type ErrorList []*Error

func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// ParseFile reads and parses the file at path (Parse). Errors: the file
// cannot be read or is larger than MaxInputBytes (an *os.PathError or a
// plain error naming the file), or Parse's.
func ParseFile(path string) (*Output, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > MaxInputBytes {
		return nil, fmt.Errorf("%s: larger than %d MiB, too large for an nccl-tests output", path, MaxInputBytes>>20)
	}
	return Parse(path, data)
}

// Parse parses one nccl-tests or theseus-bench text output; file names it
// in errors and, when no test line says which collective the rows are of,
// CollectiveInName(file) does. Parse never panics; it returns the Output it
// could read, and an ErrorList when some lines were wrong: a row that is
// cut short or has a malformed column, a footer line with a malformed
// number, rows of no known collective, runs of different world sizes in
// one file.
func Parse(file string, data []byte) (*Output, error) {
	p := &parser{out: &Output{File: file}, layout: defaultLayout}
	p.run(data)
	if len(p.errs) > 0 {
		return p.out, p.errs
	}
	return p.out, nil
}

// layout is the row format the column header announces.
type layout struct {
	perIter bool   // -I 1: i_min i_max i_p99 i_cv% after each #wrong
	trailer string // label of the text after the last column: "schedule", "timestamp" or ""
}

var defaultLayout = layout{}

func (l layout) columns() int {
	if l.perIter {
		return 5 + 2*8
	}
	return 5 + 2*4
}

type parser struct {
	out  *Output
	errs ErrorList
	stop bool
	// lastCut: the line being read is the input's last and has no
	// newline (the writer stopped mid-line: a run killed or out of disk).
	lastCut bool

	layout  layout
	coll    string // canonical collective of the current test
	noColl  bool   // the "no collective" error has been reported
	inNames string // CollectiveInName(file), computed once

	// Device lists: a list starts at "# Using devices"; a file may hold
	// several runs, which must agree on the number of ranks.
	seen      map[int]bool // ranks of the first list
	cur       map[int]bool // ranks of the list being read
	curLine   int          // its "# Using devices" line
	listCount int          // lists seen
}

func (p *parser) errorf(line, col int, hint, format string, args ...any) {
	if p.stop {
		return
	}
	if len(p.errs) == MaxErrors {
		p.errs = append(p.errs, &Error{File: p.out.File, Line: line, Col: col, Msg: "too many errors; stopped here"})
		p.stop = true
		return
	}
	p.errs = append(p.errs, &Error{File: p.out.File, Line: line, Col: col, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

// tok is a whitespace-separated field and its 1-based byte column.
type tok struct {
	s   string
	col int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' }

func fields(line string) []tok {
	var t []tok
	for i := 0; i < len(line); {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		j := i
		for j < len(line) && !isSpace(line[j]) {
			j++
		}
		if j > i {
			t = append(t, tok{line[i:j], i + 1})
		}
		i = j
	}
	return t
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (p *parser) run(data []byte) {
	n := 0
	for len(data) > 0 && !p.stop {
		n++
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
			p.lastCut = true
		}
		p.line(n, strings.TrimRight(string(line), "\r"))
	}
	p.endDeviceList()
	if p.out.Tool != TheseusBench {
		p.out.NRanks = len(p.seen)
	}
}

func (p *parser) line(n int, line string) {
	t := fields(line)
	switch {
	case len(t) == 0:
	case strings.HasPrefix(t[0].s, "#"):
		p.comment(n, line, t)
	case len(t) >= 2 && isDigits(t[0].s) && isDigits(t[1].s):
		p.row(n, line, t)
	default:
		p.out.Noise = append(p.out.Noise, Line{Line: n, Text: line})
	}
}

var (
	reVersion = regexp.MustCompile(`^#\s*nccl-tests version (\S+)(?:\s+nccl-headers=(\d+))?(?:\s+nccl-library=(\d+))?`)
	reStart   = regexp.MustCompile(`^#\s*Collective test starting:\s*(\S+)`)
	reTheseus = regexp.MustCompile(`^#\s*theseus-bench:\s*(\d+) ranks?\b(?:.*\bbackend (\S+))?`)
	reRank    = regexp.MustCompile(`^#\s*Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?(?:\s+on\s+(\S+))?(?:\s+device\s+(\d+))?(?:\s+\[([^\]]*)\])?\s*(.*)$`)
	reFooter  = regexp.MustCompile(`^#\s*(Out of bounds values|Wrong elements|Avg bus bandwidth)\s*:\s*`)
)

func atoi(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return v
}

func (p *parser) comment(n int, line string, t []tok) {
	out := p.out
	// The patterns match from the '#'; off turns their offsets into the
	// line's.
	off := t[0].col - 1
	line = line[off:]
	// The words after '#' ("#size" and "# size" alike).
	words := t
	if t[0].s == "#" {
		words = t[1:]
	} else {
		words = append([]tok{{t[0].s[1:], t[0].col + 1}}, t[1:]...)
	}
	if len(words) == 0 {
		return
	}
	if m := reVersion.FindStringSubmatch(line); m != nil {
		out.Tool = NCCLTests
		out.Version, out.NCCLHeaders, out.NCCLLibrary = m[1], atoi(m[2]), atoi(m[3])
		return
	}
	if m := reStart.FindStringSubmatch(line); m != nil {
		if out.Tool == ToolUnknown {
			out.Tool = NCCLTests
		}
		p.startTest(n, m[1])
		return
	}
	if m := reTheseus.FindStringSubmatch(line); m != nil {
		out.Tool = TheseusBench
		out.NRanks, out.Backend = atoi(m[1]), m[2]
		return
	}
	if m := reRank.FindStringSubmatch(line); m != nil {
		p.device(n, m)
		return
	}
	if loc := reFooter.FindStringSubmatchIndex(line); loc != nil {
		p.footer(n, line, line[loc[2]:loc[3]], loc[1], off)
		return
	}
	w0 := words[0].s
	switch {
	case w0 == "Using" && len(words) > 1 && words[1].s == "devices":
		p.endDeviceList()
		p.cur, p.curLine = map[int]bool{}, n
	case w0 == "nThread" || w0 == "minBytes":
		p.params(n, words)
	case w0 == "size" && len(words) > 1 && words[1].s == "count":
		p.columnHeader(n, words)
	case len(words) == 1 && Known(w0) && Canonical(w0) == strings.ToLower(w0):
		// theseus-bench's "# allreduce" heading.
		p.startTest(n, w0)
	}
}

func (p *parser) startTest(n int, name string) {
	c := Canonical(name)
	p.out.Tests = append(p.out.Tests, Test{Line: n, Name: name, Collective: c})
	p.coll = c
}

func (p *parser) device(n int, m []string) {
	rank := atoi(m[1])
	d := Device{Line: n, Rank: rank, Group: atoi(m[2]), Pid: atoi(m[3]), Host: m[4], Device: atoi(m[5]),
		PCI: m[6], Name: strings.TrimSpace(m[7])}
	if p.cur == nil { // a Rank line without "# Using devices"
		p.cur, p.curLine = map[int]bool{}, n
	}
	if !p.cur[rank] {
		p.cur[rank] = true
		if p.listCount == 0 {
			p.out.Devices = append(p.out.Devices, d)
		}
	}
}

// endDeviceList closes the device list being read (at the next
// "# Using devices" and at the end): a later run must have as many ranks
// as the first.
func (p *parser) endDeviceList() {
	if p.cur == nil {
		return
	}
	p.listCount++
	if p.listCount == 1 {
		p.seen = p.cur
	} else if len(p.cur) != len(p.seen) {
		p.errorf(p.curLine, 1, "split the file: one world size per output",
			"this run has %d ranks, an earlier run in the file had %d", len(p.cur), len(p.seen))
	}
	p.cur = nil
}

// params reads "nThread 1 nGpus 1 minBytes 8 maxBytes 67108864 step:
// 8(factor) warmup iters: 3 iters: 10 agg iters: 1 validation: 1 graph: 0
// unalign: 0" (nccl-tests) or "minBytes 8 maxBytes 268435456 step:
// 2(factor) warmup iters: 5 iters: 20 (scaled down with size) validation:
// 1" (theseus-bench). Unknown keys and words in parentheses are skipped.
func (p *parser) params(n int, words []tok) {
	pr := &p.out.Params
	pr.Line = n
	var key []string
	paren := false
	for _, w := range words {
		s := w.s
		if paren || strings.HasPrefix(s, "(") {
			paren = !strings.HasSuffix(s, ")")
			continue
		}
		num, unit := s, ""
		if i := strings.IndexByte(s, '('); i > 0 {
			num, unit = s[:i], s[i:]
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			key = append(key, strings.TrimSuffix(s, ":"))
			continue
		}
		k := strings.Join(key, " ")
		key = key[:0]
		iv := int(max(min(v, math.MaxInt32), math.MinInt32))
		switch k {
		case "nThread":
			pr.NThread = iv
		case "nGpus":
			pr.NGpus = iv
		case "minBytes":
			pr.MinBytes = v
		case "maxBytes":
			pr.MaxBytes = v
		case "step":
			if unit == "(bytes)" {
				pr.StepBytes = v
			} else {
				pr.StepFactor = v
			}
		case "warmup iters":
			pr.WarmupIters = iv
		case "iters":
			pr.Iters = iv
		case "agg iters":
			pr.AggIters = iv
		case "validation":
			pr.Validation = iv
		case "graph":
			pr.Graph = iv
		case "unalign":
			pr.Unalign = iv
		}
	}
}

// columnHeader reads the column labels: "size count type redop root time
// algbw busbw #wrong time algbw busbw #wrong [schedule|timestamp]", with
// "cputime" for "time" under -C 1 and i_min i_max i_p99 i_cv% after each
// #wrong under -I 1.
func (p *parser) columnHeader(n int, words []tok) {
	l := layout{}
	for _, w := range words {
		if w.s == "i_min" {
			l.perIter = true
		}
	}
	want := l.columns()
	if len(words) < want {
		p.errorf(n, words[len(words)-1].col+len(words[len(words)-1].s), "",
			"column header has %d labels, want at least %d (size count type redop root, then time algbw busbw #wrong out of place and in place)", len(words), want)
		return
	}
	p.out.CPUTime = words[5].s == "cputime"
	var extra []string
	for _, w := range words[want:] {
		extra = append(extra, w.s)
	}
	l.trailer = strings.Join(extra, " ")
	p.layout = l
}

func (p *parser) footer(n int, line, what string, at, off int) {
	f := &p.out.Footer
	f.Line = n
	rest := line[at:]
	t := fields(rest)
	col := off + at + 1
	if len(t) > 0 {
		col = off + at + t[0].col
	}
	if len(t) == 0 {
		p.errorf(n, col, "", "%s: no value", what)
		return
	}
	if what == "Avg bus bandwidth" {
		v, ok := parseFloat(t[0].s)
		if !ok {
			p.errorf(n, col, "", "%s: %q is not a number", what, t[0].s)
			return
		}
		f.AvgBusBW = &v
		return
	}
	v, err := strconv.ParseInt(t[0].s, 10, 64)
	if err != nil || v < 0 {
		p.errorf(n, col, "", "%s: %q is not a count", what, t[0].s)
		return
	}
	f.Wrong = &v
}

// parseFloat reads a float as C's printf writes it, "nan", "-nan" and
// "inf" included.
func parseFloat(s string) (float64, bool) {
	switch strings.ToLower(s) {
	case "nan", "-nan", "+nan":
		return math.NaN(), true
	}
	if s == "" || !(s[0] >= '0' && s[0] <= '9' || s[0] == '-' || s[0] == '+' || s[0] == '.' || s[0] == 'i' || s[0] == 'I') {
		return 0, false
	}
	if strings.ContainsAny(s, "_xXpP") { // Go-only syntax C never prints
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

const rowHint = "another program's output may have cut the row; send library logs elsewhere (NCCL_DEBUG_FILE, THESEUS_DEBUG_FILE) or to stderr"

// eofHint replaces rowHint for a row cut short by the end of the input.
const eofHint = "the file ends in the middle of this row, without a newline: the run was cut short (killed, timed out, out of disk) or the file was copied only in part; remove the partial last line to compare the rows before it"

func (p *parser) row(n int, line string, t []tok) {
	r := Row{Line: n, Collective: p.coll}
	if r.Collective == "" {
		if p.inNames == "" {
			p.inNames = CollectiveInName(p.out.File)
			if p.inNames == "" {
				p.inNames = "-"
			}
		}
		if p.inNames != "-" {
			r.Collective = p.inNames
		} else if !p.noColl {
			p.noColl = true
			p.errorf(n, 1, "nccl-tests prints it in its header; or name the file after the test (all_reduce.txt)",
				"rows of no known collective: no '# Collective test starting:' line or '# <collective>' heading before them, and the file name names none")
		}
	}
	end := len(line) + 1 // column just past the line
	want := p.layout.columns()
	if len(t) < want {
		hint := rowHint
		if p.lastCut {
			hint = eofHint
		}
		p.errorf(n, end, hint, "row ends after %d of %d columns (size count type redop root, then time algbw busbw #wrong out of place and in place)", len(t), want)
		return
	}
	var ok bool
	if r.Bytes, ok = p.count(n, t[0], "size"); !ok {
		return
	}
	if r.Count, ok = p.count(n, t[1], "count"); !ok {
		return
	}
	r.Type, r.RedOp = t[2].s, t[3].s
	root, err := strconv.Atoi(t[4].s)
	if err != nil || root < -1 || root > math.MaxInt32 {
		p.errorf(n, t[4].col, rowHint, "root %q is not a rank or -1", t[4].s)
		return
	}
	r.Root = root
	i := 5
	for _, res := range []*Result{&r.OutOfPlace, &r.InPlace} {
		if !p.result(n, t[i:], res) {
			return
		}
		i += 4
		if p.layout.perIter {
			i += 4
		}
	}
	if i < len(t) {
		rest := strings.TrimSpace(line[t[i].col-1:])
		switch p.layout.trailer {
		case "schedule":
			r.Schedule = rest
		case "timestamp":
			r.Timestamp = rest
		default:
			hint := rowHint
			if p.layout.trailer != "" {
				hint = fmt.Sprintf("the column header names the extra column %q, which this parser does not know", p.layout.trailer)
			}
			p.errorf(n, t[i].col, hint, "unexpected text %q after the in-place #wrong column", truncate(rest, 40))
			return
		}
	}
	p.out.Rows = append(p.out.Rows, r)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (p *parser) count(n int, t tok, what string) (int64, bool) {
	v, err := strconv.ParseInt(t.s, 10, 64)
	if err != nil || v < 0 {
		p.errorf(n, t.col, rowHint, "%s %q is not a count that fits 63 bits", what, t.s)
		return 0, false
	}
	return v, true
}

// result reads time algbw busbw #wrong [i_min i_max i_p99 i_cv%].
func (p *parser) result(n int, t []tok, res *Result) bool {
	names := [...]string{"time", "algbw", "busbw"}
	var v [3]float64
	for k := range names {
		f, ok := parseFloat(t[k].s)
		if !ok {
			p.errorf(n, t[k].col, rowHint, "%s %q is not a number", names[k], t[k].s)
			return false
		}
		v[k] = f
	}
	res.TimeUS, res.AlgBW, res.BusBW = v[0], v[1], v[2]
	w := t[3]
	if w.s != "N/A" {
		// %6g of a double: "0", "12", "1e+06".
		f, ok := parseFloat(w.s)
		if !ok || f < 0 || f != math.Trunc(f) || f >= 1<<63 {
			p.errorf(n, w.col, rowHint, "#wrong %q is not a count or N/A", w.s)
			return false
		}
		c := int64(f)
		res.Wrong = &c
	}
	if !p.layout.perIter {
		return true
	}
	var s [4]float64
	for k := range s {
		f, ok := parseFloat(t[4+k].s)
		if !ok {
			p.errorf(n, t[4+k].col, rowHint, "per-iteration column %q is not a number", t[4+k].s)
			return false
		}
		s[k] = f
	}
	res.Iter = &IterStats{MinUS: s[0], MaxUS: s[1], P99US: s[2], CVPct: s[3]}
	return true
}
