package selector

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// The consistency acceptance test (issue 4): 8 ranks each read their own
// copy of a context that is updated while they run. Entries reach each copy
// after random per-rank delays (written torn, in two pieces, across a
// request boundary), schedules and attributes are added, and exo values
// change 1000 times, while each rank issues the same 10^5 requests (mixed
// collectives, sizes, roots and arrangements). A reference model computes,
// for every request, what the agreed snapshot must be — every file's prefix
// that all ranks had when the epoch began, and the least of the ranks'
// clocks — and what it selects. Every rank must return exactly that: so all
// ranks agree on every request, and an entry takes effect at the first epoch
// after every rank can see it, i.e. within one check period.

const (
	cRanks  = 8
	cPeriod = 100
	cTick   = time.Millisecond // a rank's clock advances one tick per request
)

// cEvent is one line appended to one file of the context.
type cEvent struct {
	file string
	line string
	pub  int // request index at which it is published
	seq  int // index within its file
}

// mValue is an attribute value in the model.
type mValue struct {
	i int64
	f float64
	b bool
	v []float64
}

type mAttr struct {
	name  string
	ok    bool
	exo   bool
	va    int64 // valid_after, ns (MinInt64: always)
	def   mValue
	log   []mLog
	index int
}

type mLog struct {
	va  int64
	val mValue
}

// mEnv is what model policies read.
type mEnv struct {
	msg     int64
	vals    map[string]mValue
	aligned bool // request.sendbuf % 4096 == 0 on every rank
}

type mSched struct {
	id        int
	ok        bool // well-formed and compiles
	coll      ir.Collective
	minB      int64
	maxB      int64
	va        int64
	attrs     []string // exo attributes read
	bad       bool     // the file fails verification
	rankLocal bool
	usable    func(e *mEnv) bool
	pref      func(e *mEnv) float64
}

type cWorld struct {
	events  []cEvent
	files   map[string][]int // file -> event indices in order
	attrs   []*mAttr
	byName  map[string]*mAttr
	scheds  []*mSched
	arrive  [cRanks][]int // per rank, per event: request index of arrival
	skew    [cRanks]time.Duration
	reqs    []*Request
	sendOff [][cRanks]uintptr
}

var cT0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func vaString(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

func (w *cWorld) add(file, line string, pub int) {
	w.events = append(w.events, cEvent{file: file, line: line, pub: pub, seq: len(w.files[file])})
	w.files[file] = append(w.files[file], len(w.events)-1)
}

func fmtVal(v mValue, typ string) string {
	switch typ {
	case "int":
		return strconv.FormatInt(v.i, 10)
	case "float":
		return strconv.FormatFloat(v.f, 'g', -1, 64)
	case "bool":
		return strconv.FormatBool(v.b)
	}
	parts := make([]string, len(v.v))
	for i, x := range v.v {
		parts[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// buildWorld generates the whole run: events, arrivals, requests.
func buildWorld(n int, seed uint64) *cWorld {
	rng := rand.New(rand.NewPCG(seed, 42))
	w := &cWorld{files: map[string][]int{}, byName: map[string]*mAttr{}}
	tick := func(i int) int64 { return cT0.Add(time.Duration(i) * cTick).UnixNano() }
	// Publication times are spread over the run; a third of the entries get
	// a valid_after up to two periods after publication.
	validAfter := func(pub int) (string, int64) {
		if rng.IntN(3) != 0 {
			return "", math.MinInt64
		}
		va := tick(pub + rng.IntN(2*cPeriod))
		return `,"valid_after":"` + vaString(va) + `"`, va
	}
	attrTypes := map[string]string{}
	declare := func(name, typ string, exo bool, path string, def mValue, pub int) {
		a := &mAttr{name: name, ok: true, exo: exo, va: math.MinInt64, def: def, index: len(w.attrs)}
		line := fmt.Sprintf(`{"name":%q,"type":%q,"origin":"endo","path":%q}`, name, typ, path)
		if exo {
			vs, va := validAfter(pub)
			if pub == 0 {
				vs, va = "", math.MinInt64
			}
			a.va = va
			line = fmt.Sprintf(`{"name":%q,"type":%q,"origin":"exo","default":%s%s}`, name, typ, fmtVal(def, typ), vs)
		}
		w.attrs = append(w.attrs, a)
		w.byName[name] = a
		attrTypes[name] = typ
		w.add(manifest.AttributeManifest, line, pub)
	}
	declare("msgsize", "int", false, "request.messagesize", mValue{}, 0)
	declare("coll", "int", false, "request.coll", mValue{}, 0)
	declare("sendbuf", "int", false, "request.sendbuf", mValue{}, 0)
	declare("slow_rank", "int", true, "", mValue{i: -1}, 0)
	declare("load", "float", true, "", mValue{f: 0.5}, 0)
	declare("bw", "vector", true, "", mValue{v: []float64{1, 2, 3, 4}}, 0)
	declare("degraded", "bool", true, "", mValue{}, 0)
	w.attrs = append(w.attrs, &mAttr{name: "", index: len(w.attrs)}) // a malformed line
	w.add(manifest.AttributeManifest, `{"name":"broken","type":`, 0)

	// Late attributes, declared during the run.
	for k := 0; k < 4; k++ {
		declare(fmt.Sprintf("boost%d", k), "int", true, "", mValue{i: int64(k)}, 1+rng.IntN(n*3/4))
	}

	// Schedules.
	colls := []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.Broadcast}
	addSched := func(pub int) {
		id := len(w.scheds)
		s := &mSched{id: id, ok: true, coll: colls[rng.IntN(len(colls))], va: math.MinInt64}
		file := fmt.Sprintf("s%d.json", id)
		W := int64(rng.IntN(10))
		S := int64(rng.IntN(cRanks))
		extra := ""
		if rng.IntN(3) == 0 {
			s.minB = int64(1) << rng.IntN(16)
			s.maxB = s.minB << rng.IntN(12)
			extra += fmt.Sprintf(`,"min_bytes":%d,"max_bytes":%d`, s.minB, s.maxB)
		}
		if id > 0 && rng.IntN(4) == 0 {
			extra += fmt.Sprintf(`,"replaces":%d`, rng.IntN(id))
		}
		var usable, pref string
		switch kind := rng.IntN(10); {
		case kind < 3:
			lo, hi := int64(1)<<rng.IntN(12), int64(1)<<(8+rng.IntN(16))
			usable = fmt.Sprintf("msgsize >= %d && msgsize <= %d", lo, hi)
			pref = fmt.Sprintf("%d - (slow_rank == %d ? 50 : 0)", W, S)
			s.attrs = []string{"slow_rank"}
			s.usable = func(e *mEnv) bool { return e.msg >= lo && e.msg <= hi }
			s.pref = func(e *mEnv) float64 {
				p := W
				if e.vals["slow_rank"].i == S {
					p -= 50
				}
				return float64(p)
			}
		case kind < 6:
			usable = fmt.Sprintf("!degraded || %d > 5", W)
			pref = fmt.Sprintf("%d * load + bw[%d %% 4]", W, S)
			s.attrs = []string{"degraded", "load", "bw"}
			s.usable = func(e *mEnv) bool { return !e.vals["degraded"].b || W > 5 }
			s.pref = func(e *mEnv) float64 { return float64(float64(W)*e.vals["load"].f) + e.vals["bw"].v[S%4] }
		case kind < 8:
			b := fmt.Sprintf("boost%d", rng.IntN(4))
			usable = "true"
			pref = fmt.Sprintf("%s * 2 + %d", b, W)
			s.attrs = []string{b}
			s.usable = func(*mEnv) bool { return true }
			s.pref = func(e *mEnv) float64 { return float64(e.vals[b].i*2 + W) }
		case kind < 9:
			usable = "sendbuf % 4096 == 0"
			pref = fmt.Sprint(W)
			s.rankLocal = true
			s.usable = func(e *mEnv) bool { return e.aligned }
			s.pref = func(*mEnv) float64 { return float64(W) }
		default:
			switch rng.IntN(3) {
			case 0:
				usable = "msgsize && true" // type error
			case 1:
				usable = "msgsize >" // syntax error
			default:
				usable, pref = "true", "1"
				s.bad = true // the file fails verification
			}
			if !s.bad {
				s.ok = false
			}
		}
		if pref == "" {
			pref = "0"
		}
		vs, va := validAfter(pub)
		if pub == 0 {
			vs, va = "", math.MinInt64
		}
		s.va = va
		line := fmt.Sprintf(`{"file":%q,"collective":%q,"nranks":8,"usable":%q,"preference":%q%s%s}`,
			file, s.coll, usable, pref, extra, vs)
		if rng.IntN(25) == 0 {
			line = line[:len(line)/2] // malformed
			s.ok = false
		}
		w.scheds = append(w.scheds, s)
		w.add(manifest.ScheduleManifest, line, pub)
	}
	for i := 0; i < 16; i++ {
		addSched(0)
	}
	for i := 0; i < 24; i++ {
		addSched(1 + rng.IntN(n-1))
	}

	// 1000 value changes.
	exo := []string{"slow_rank", "load", "bw", "degraded", "boost0", "boost1", "boost2", "boost3"}
	for c := 0; c < 1000; c++ {
		name := exo[rng.IntN(len(exo))]
		pub := 1 + rng.IntN(n-1)
		var v mValue
		switch attrTypes[name] {
		case "int":
			v.i = int64(rng.IntN(12)) - 2
			if name == "slow_rank" {
				v.i = int64(rng.IntN(cRanks+1)) - 1
			}
		case "float":
			v.f = float64(rng.IntN(16)) / 8
		case "bool":
			v.b = rng.IntN(2) == 0
		case "vector":
			v.v = []float64{float64(rng.IntN(8)), float64(rng.IntN(8)), float64(rng.IntN(8)), float64(rng.IntN(8))}
		}
		vs, va := validAfter(pub)
		a := w.byName[name]
		a.log = append(a.log, mLog{va: va, val: v})
		w.add(name+manifest.LogSuffix, fmt.Sprintf(`{"value":%s%s}`, fmtVal(v, attrTypes[name]), vs), pub)
	}
	// Log lines were generated out of publication order: sort each file's
	// lines by publication (keeping the model's log order in step).
	w.sortByPub()

	// Arrivals: each rank gets each line after a random delay (up to three
	// periods; rank 5 is always a period late), in file order.
	names := make([]string, 0, len(w.files))
	for f := range w.files {
		names = append(names, f)
	}
	slices.Sort(names) // map order must not feed the random stream
	for r := 0; r < cRanks; r++ {
		w.arrive[r] = make([]int, len(w.events))
		for _, name := range names {
			idx := w.files[name]
			prev := 0
			for _, e := range idx {
				d := rng.IntN(3 * cPeriod)
				if r == 5 {
					d += cPeriod
				}
				a := max(prev, w.events[e].pub+d)
				if w.events[e].pub == 0 && r != 5 {
					a = 0
				}
				w.arrive[r][e] = a
				prev = a
			}
		}
		w.skew[r] = time.Duration(rng.IntN(6*cPeriod)-3*cPeriod) * cTick
	}

	// Requests, the same for all ranks.
	counts := []int64{1, 100, 1000, 4096, 65536, 1 << 20}
	for i := 0; i < n; i++ {
		c := colls[rng.IntN(len(colls))]
		r := req(c, counts[rng.IntN(len(counts))])
		r.InPlace = rng.IntN(2) == 0
		if c == ir.Broadcast {
			r.Root = rng.IntN(cRanks)
		}
		w.reqs = append(w.reqs, r)
		var off [cRanks]uintptr
		if rng.IntN(4) == 0 {
			off[rng.IntN(cRanks)] = 8 // one rank's buffer is misaligned
		}
		w.sendOff = append(w.sendOff, off)
	}
	return w
}

// sortByPub reorders value-log lines by publication time, in the events,
// the per-file indices and the model logs alike.
func (w *cWorld) sortByPub() {
	for file, idx := range w.files {
		a, isLog := w.byName[strings.TrimSuffix(file, manifest.LogSuffix)]
		if !isLog || file == manifest.AttributeManifest || file == manifest.ScheduleManifest {
			continue
		}
		order := make([]int, len(idx))
		for i := range order {
			order[i] = i
		}
		sortStable(order, func(x, y int) bool { return w.events[idx[x]].pub < w.events[idx[y]].pub })
		lines := make([]cEvent, len(idx))
		logs := make([]mLog, len(idx))
		for i, o := range order {
			lines[i] = w.events[idx[o]]
			logs[i] = a.log[o]
		}
		for i, e := range idx {
			lines[i].seq = i
			w.events[e] = lines[i]
		}
		a.log = logs
	}
}

func sortStable(a []int, less func(x, y int) bool) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && less(a[j], a[j-1]); j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func (w *cWorld) clock(r, i int) int64 {
	return cT0.Add(time.Duration(i)*cTick + w.skew[r]).UnixNano()
}

// model computes what every rank must select for every request.
func (w *cWorld) model() []int {
	n := len(w.reqs)
	out := make([]int, n)
	prefix := func(file string, i int) int {
		m := math.MaxInt
		for r := 0; r < cRanks; r++ {
			k := 0
			for _, e := range w.files[file] {
				if w.arrive[r][e] <= i {
					k++
				}
			}
			m = min(m, k)
		}
		return m
	}
	agreedAttrs := 0
	var vis map[string]bool
	var vals map[string]mValue
	var active []*mSched
	for i := 0; i < n; i++ {
		if i%cPeriod == 0 {
			agreedAttrs = min(prefix(manifest.AttributeManifest, i), agreedAttrs+AttrWindow)
			scheds := prefix(manifest.ScheduleManifest, i)
			cut := int64(math.MaxInt64)
			for r := 0; r < cRanks; r++ {
				cut = min(cut, w.clock(r, i))
			}
			vis, vals = map[string]bool{}, map[string]mValue{}
			for _, a := range w.attrs[:agreedAttrs] {
				if !a.ok || a.va > cut {
					continue
				}
				vis[a.name] = true
				if a.exo {
					v := a.def
					for _, l := range a.log[:prefix(a.name+manifest.LogSuffix, i)] {
						if l.va <= cut {
							v = l.val
						}
					}
					vals[a.name] = v
				}
			}
			active = active[:0]
		next:
			for _, s := range w.scheds[:scheds] {
				if !s.ok || s.bad || s.va > cut {
					continue
				}
				for _, a := range s.attrs {
					if !vis[a] {
						continue next
					}
				}
				active = append(active, s)
			}
		}
		r := w.reqs[i]
		msg, _ := ir.MessageBytes(r.Coll, r.NRanks, r.Count, r.DataType)
		e := &mEnv{msg: msg, vals: vals, aligned: true}
		for _, off := range w.sendOff[i] {
			if off != 0 {
				e.aligned = false
			}
		}
		best, bestPref := None, 0.0
		for _, s := range active {
			if s.coll != r.Coll || msg < s.minB || s.maxB != 0 && msg > s.maxB || !s.usable(e) {
				continue
			}
			if p := s.pref(e); best == None || p >= bestPref {
				best, bestPref = s.id, p
			}
		}
		out[i] = best
	}
	return out
}

// rankCopy replays the arrivals into one rank's copy of the context.
type rankCopy struct {
	dir     string
	files   map[string]*os.File
	pending map[string]int // file -> next line (position in w.files[file])
	torn    map[string]int // file -> bytes of the next line already written
}

func (c *rankCopy) write(name, s string) error {
	f := c.files[name]
	if f == nil {
		var err error
		f, err = os.OpenFile(filepath.Join(c.dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		c.files[name] = f
	}
	_, err := f.WriteString(s)
	return err
}

// advance writes every line that arrives at or before request i, and the
// first half of each line that arrives at i+1 (a torn line that the epoch
// of request i may see).
func (w *cWorld) advance(c *rankCopy, r, i int) error {
	for file, idx := range w.files {
		for c.pending[file] < len(idx) {
			e := idx[c.pending[file]]
			line := w.events[e].line + "\n"
			a := w.arrive[r][e]
			if a <= i {
				if err := c.write(file, line[c.torn[file]:]); err != nil {
					return err
				}
				c.pending[file]++
				c.torn[file] = 0
				continue
			}
			if a == i+1 && c.torn[file] == 0 {
				c.torn[file] = len(line) / 2
				if err := c.write(file, line[:c.torn[file]]); err != nil {
					return err
				}
			}
			break
		}
	}
	return nil
}

func runConsistency(t *testing.T, n int) {
	w := buildWorld(n, 1)
	want := w.model()
	agree := NewInProcessGroup(cRanks)
	got := make([][]int32, cRanks)
	errs := make([]error, cRanks)
	var wg sync.WaitGroup
	for r := 0; r < cRanks; r++ {
		dir := t.TempDir()
		for k := range w.scheds {
			f := allreduce8()
			f.Collective = w.scheds[k].coll.String()
			if w.scheds[k].bad {
				f.Bad = "verification failed: TS0207 the schedule does not compute its collective"
			}
			b := fmt.Sprintf(`{"collective":%q,"nranks":8,"inplace":true,"outofplace":true,"bad":%q}`, f.Collective, f.Bad)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("s%d.json", k)), []byte(b), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c := &rankCopy{dir: dir, files: map[string]*os.File{}, pending: map[string]int{}, torn: map[string]int{}}
			defer func() {
				for _, f := range c.files {
					f.Close()
				}
			}()
			i := 0
			s, err := New(Options{Dir: dir, CheckPeriod: cPeriod, Agreement: agree[r], Loader: &fakeLoader{},
				Clock: func() time.Time { return time.Unix(0, w.clock(r, i)) }, Location: time.UTC,
				Logger: &logSink{}, Timeout: time.Minute})
			if err != nil {
				errs[r] = err
				return
			}
			defer s.Close()
			got[r] = make([]int32, n)
			ctx := context.Background()
			base := uintptr(0x10000 * (r + 1))
			for i = 0; i < n; i++ {
				if err := w.advance(c, r, i); err != nil {
					errs[r] = err
					return
				}
				q := *w.reqs[i]
				q.SendBuf = base + w.sendOff[i][r]
				id, err := s.Select(ctx, &q)
				if err != nil {
					errs[r] = fmt.Errorf("rank %d request %d: %w", r, i, err)
					return
				}
				got[r][i] = int32(id)
			}
			if r == 0 {
				t.Logf("rank 0: %+v", s.Stats())
			}
		}(r)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	distinct := map[int]bool{}
	for i := 0; i < n; i++ {
		distinct[want[i]] = true
		for r := 0; r < cRanks; r++ {
			if int(got[r][i]) != want[i] {
				t.Fatalf("request %d (%+v): rank %d selected %d, the model %d", i, *w.reqs[i], r, got[r][i], want[i])
			}
		}
	}
	// The run must exercise what it claims to: many schedules chosen, and
	// changes of the selection over time for the same request shape.
	if len(distinct) < 15 {
		t.Fatalf("only %d distinct selections", len(distinct))
	}
	t.Logf("%d requests x %d ranks, %d events, %d distinct selections: all ranks agree with the model", n, cRanks, len(w.events), len(distinct))
}

func TestConsistency(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	runConsistency(t, n)
}

// TestConsistencyAsync: the same world, but each rank's copy is written by
// its own goroutine at its own pace, independently of the requests: lines
// are written in two pieces with a pause between them, and schedule files
// are written late (after their manifest line, on some ranks only after
// they have already won a selection, so the agreed load finds them
// missing and retries). No model can predict the snapshots here; the ranks
// must still select the same schedule for every request.
func TestConsistencyAsync(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	w := buildWorld(n, 2)
	agree := NewInProcessGroup(cRanks)
	got := make([][]int32, cRanks)
	errs := make([]error, cRanks)
	sinks := make([]*logSink, cRanks)
	stop := make(chan struct{})
	var wg, writers sync.WaitGroup
	order := make([]int, len(w.events))
	for i := range order {
		order[i] = i
	}
	sortStable(order, func(x, y int) bool { return w.events[x].pub < w.events[y].pub })
	for r := 0; r < cRanks; r++ {
		dir := t.TempDir()
		writers.Add(1)
		go func(r int) { // the writer of rank r's copy
			defer writers.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			c := &rankCopy{dir: dir, files: map[string]*os.File{}}
			defer func() {
				for _, f := range c.files {
					f.Close()
				}
			}()
			pause := func(max time.Duration) bool {
				select {
				case <-stop:
					return false
				case <-time.After(time.Duration(rng.Int64N(int64(max)))):
					return true
				}
			}
			for _, e := range order {
				ev := w.events[e]
				if ev.pub > 0 && !pause(4*time.Millisecond) {
					return
				}
				line := ev.line + "\n"
				half := rng.IntN(len(line))
				if c.write(ev.file, line[:half]) != nil || ev.pub > 0 && !pause(200*time.Microsecond) || c.write(ev.file, line[half:]) != nil {
					return
				}
				if ev.file == manifest.ScheduleManifest {
					k := ev.seq
					delay := time.Duration(0)
					if k%3 == 0 {
						delay = time.Duration(rng.Int64N(int64(20 * time.Millisecond)))
					}
					writers.Add(1)
					go func() { // the schedule file lands later, at its own pace
						defer writers.Done()
						select {
						case <-stop:
							return
						case <-time.After(delay):
						}
						b := fmt.Sprintf(`{"collective":%q,"nranks":8,"inplace":true,"outofplace":true}`, w.scheds[k].coll)
						if w.scheds[k].bad {
							b = `{"bad":"verification failed"}`
						}
						os.WriteFile(filepath.Join(dir, fmt.Sprintf("s%d.json", k)), []byte(b), 0o644)
					}()
				}
			}
		}(r)
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			i := 0
			sinks[r] = &logSink{}
			s, err := New(Options{Dir: dir, CheckPeriod: cPeriod, Agreement: agree[r], Loader: &fakeLoader{},
				Clock: func() time.Time { return time.Unix(0, w.clock(r, i)) }, Location: time.UTC,
				Logger: sinks[r], Timeout: time.Minute})
			if err != nil {
				errs[r] = err
				return
			}
			defer s.Close()
			got[r] = make([]int32, n)
			ctx := context.Background()
			base := uintptr(0x10000 * (r + 1))
			for i = 0; i < n; i++ {
				q := *w.reqs[i]
				q.SendBuf = base + w.sendOff[i][r]
				id, err := s.Select(ctx, &q)
				if err != nil {
					errs[r] = fmt.Errorf("rank %d request %d: %w", r, i, err)
					return
				}
				got[r][i] = int32(id)
			}
			if r == 0 {
				t.Logf("rank 0: %+v", s.Stats())
			}
		}(r)
	}
	wg.Wait()
	close(stop)
	writers.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	distinct := map[int32]bool{}
	for i := 0; i < n; i++ {
		distinct[got[0][i]] = true
		for r := 1; r < cRanks; r++ {
			if got[r][i] != got[0][i] {
				t.Fatalf("request %d (%+v): rank %d selected %d, rank 0 %d", i, *w.reqs[i], r, got[r][i], got[0][i])
			}
		}
	}
	missing := strings.Count(sinks[0].dump(), "schedule file missing")
	t.Logf("%d requests x %d ranks, %d distinct selections, %d agreed missing-file loads: all ranks agree", n, cRanks, len(distinct), missing)
}
