package schedjson

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/frontends/msccl"
	"github.com/theseus-ccl/theseus/compiler/frontends/mscclpp"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
)

// corpusDir is ../shared/corpus beside the checkout.
var corpusDir = filepath.Join(repoRoot, "..", "shared", "corpus")

// agree checks the fast path against the careful path on data: when the
// fast path accepts it, the careful path must accept it with no diagnostic
// and build the identical program (positions, File, nil slices and all:
// cmp without options). It reports whether the fast path accepted.
func agree(t *testing.T, name string, data []byte) bool {
	t.Helper()
	return agreeLim(t, name, data, defaultLimits)
}

func agreeLim(t *testing.T, name string, data []byte, lim limits) bool {
	t.Helper()
	fp, ok := parseFast(name, data, lim)
	if !ok {
		return false
	}
	cp, ds := parseCareful(name, data, lim)
	if len(ds) != 0 || cp == nil {
		t.Fatalf("%s: the fast path accepted what the careful path rejects: %v\n%s", name, ds, clip(data))
	}
	if !reflect.DeepEqual(cp, fp) { // strict: nil and empty differ
		t.Fatalf("%s: the fast path's program differs (-careful +fast):\n%s", name, cmp.Diff(cp, fp))
	}
	return true
}

func clip(b []byte) string {
	if len(b) > 400 {
		return string(b[:400]) + "…"
	}
	return string(b)
}

// canonical returns documents the fast path must take: every example, the
// golden input, Format of every generator's programs and of the imported
// corpus.
func canonical(t *testing.T) map[string][]byte {
	t.Helper()
	docs := map[string][]byte{"doc": []byte(doc("", "", "", ""))}
	files, _ := filepath.Glob(filepath.Join(repoRoot, "examples", "*.json"))
	files2, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	for _, file := range append(files, files2...) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		docs[file] = data
	}
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	add := func(name string, p *ir.Program) {
		data, err := Format(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		docs[name] = data
	}
	for _, a := range gen.Algorithms() {
		for _, coll := range a.Collectives {
			for _, n := range []int{1, 3, 4} {
				for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
					opts := gen.Options{Collective: coll, NRanks: n, Protocol: proto, Channels: 2}
					if a.Name == "hier" {
						opts.NLocalRanks = 2
						if n%2 != 0 {
							continue
						}
					}
					p, err := gen.Generate(a.Name, opts)
					if err != nil {
						continue // not every algorithm serves every shape
					}
					add(fmt.Sprintf("gen/%s/%v/%d/%v", a.Name, coll, n, proto), p)
				}
			}
		}
	}
	for _, glob := range []string{"msccl-xml/*.xml", "mscclpp-json/*/*.json"} {
		files, _ := filepath.Glob(filepath.Join(corpusDir, glob))
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var p *ir.Program
			if strings.HasSuffix(file, ".xml") {
				p, _ = msccl.Parse(file, data)
			} else {
				p, _ = mscclpp.Parse(file, data)
			}
			if p != nil {
				if _, err := Format(p); err == nil {
					add("corpus/"+filepath.Base(file), p)
				}
			}
		}
	}
	return docs
}

// TestParseFastAgrees: on every canonical document the fast path is taken
// and builds exactly the careful path's program; on every bad file and
// fuzz seed it either gives up or agrees.
func TestParseFastAgrees(t *testing.T) {
	docs := canonical(t)
	for name, data := range docs {
		if !agree(t, name, data) {
			_, ds := parseCareful(name, data, defaultLimits)
			t.Errorf("%s: the fast path gave up on a canonical document (careful path: %v)", name, ds)
		}
	}
	t.Logf("%d canonical documents", len(docs))
	// Random programs and the every-field program (with escapes, which the
	// fast path leaves to the careful one): taken or not, they agree.
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 50 {
		agree(t, fmt.Sprintf("random/%d", i), formatted(t, randomProgram(rng)))
	}
	agree(t, "full", formatted(t, full()))
	var others []string
	for _, glob := range []string{
		filepath.Join(repoRoot, "testdata", "bad", "*.json"),
		filepath.Join("testdata", "fuzz", "*", "*"),
	} {
		files, _ := filepath.Glob(glob)
		others = append(others, files...)
	}
	for _, file := range others {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(file, "fuzz") {
			data = fuzzSeed(t, data)
		}
		agree(t, file, data)
	}
}

// fuzzSeed decodes a corpus file in Go's fuzz format holding one []byte.
func fuzzSeed(t *testing.T, data []byte) []byte {
	t.Helper()
	lines := strings.SplitN(string(data), "\n", 2)
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "go test fuzz v1") {
		t.Fatalf("not a fuzz corpus file: %q", clip(data))
	}
	var s string
	body := strings.TrimSpace(lines[1])
	if _, err := fmt.Sscanf(strings.TrimSuffix(strings.TrimPrefix(body, "[]byte("), ")"), "%q", &s); err != nil {
		t.Fatalf("fuzz seed %q: %v", clip(data), err)
	}
	return []byte(s)
}

// richDoc exercises every field of the format once: meta, root, channels
// with and without peer_channel, declared scratch, string and object refs,
// lists, chans, barrier, deps, publish, non-ASCII text.
const richDoc = `{
  "version": 1, "name": "rich · é", "collective": "broadcast", "nranks": 2, "nlocalranks": 2,
  "root": 0, "protocol": "ll", "chunks_per_block": 2, "inplace": true, "outofplace": false,
  "min_bytes": 0, "max_bytes": 1048576, "threads_per_block": 512, "slice_bytes": 4096,
  "meta": {"source": "hand", "note": "µ"},
  "ranks": [
    {"rank": 0, "input_chunks": 2, "output_chunks": 2, "scratch_chunks": 4,
     "channels": [{"id": 0, "peer": 1, "type": "memory", "init": 0},
                  {"id": 1, "peer": 1, "peer_channel": 1, "type": "port"}],
     "threadblocks": [
       {"id": 0, "ops": [
         {"op": "copy", "srcs": ["i[0]"], "dsts": [{"buf": "s", "off": 0, "packet": true, "chan": 0}, "o[0]"], "count": 2, "publish": true},
         {"op": "signal", "chans": [0, 1]},
         {"op": "barrier", "barrier": {"id": 0, "threadblocks": 2}}
       ]},
       {"id": 1, "send_peer": -1, "recv_peer": -1, "chan": -1, "ops": [
         {"op": "wait", "chans": [1], "deps": [[0, 0]]},
         {"op": "barrier", "barrier": {"threadblocks": 2, "id": 0}},
         {"op": "nop"}
       ]}
     ]},
    {"id": 1, "channels": [{"peer": 0}, {"peer": 0, "peer_channel": 1, "type": "port"}],
     "threadblocks": []}
  ]
}
`

// TestParseFastRich: the rich document takes the fast path.
func TestParseFastRich(t *testing.T) {
	if !agree(t, "rich", []byte(richDoc)) {
		_, ds := parseCareful("rich", []byte(richDoc), defaultLimits)
		t.Fatalf("fast path gave up; careful path: %v", ds)
	}
}

// TestParseFastGivesUp lists inputs outside the plain subset, or wrong:
// the fast path must give up on each (the careful path then accepts the
// valid ones and reports the others).
func TestParseFastGivesUp(t *testing.T) {
	base := doc("", "", "", "")
	repl := func(old, new string) string {
		if !strings.Contains(base, old) {
			t.Fatalf("%q not in the base document", old)
		}
		return strings.Replace(base, old, new, 1)
	}
	for name, in := range map[string]string{
		"escape in a value":   repl(`"name": "t"`, `"name": "\u0074"`),
		"escape in a key":     repl(`"name"`, `"n\u0061me"`),
		"key in another case": repl(`"version"`, `"Version"`),
		"repeated key":        repl(`"name": "t"`, `"name": "t", "name": "t"`),
		"null":                repl(`"name": "t"`, `"name": null`),
		"fraction":            repl(`"count": 1`, `"count": 1.0`),
		"exponent":            repl(`"count": 1`, `"count": 1e0`),
		"leading zero":        repl(`"count": 1`, `"count": 01`),
		"int64 overflow":      repl(`"count": 1`, `"count": 9223372036854775808`),
		"negative count":      repl(`"count": 1`, `"count": -1`),
		"version 2":           repl(`"version": 1`, `"version": 2`),
		"version string":      repl(`"version": 1`, `"version": "1"`),
		"trailing value":      base + "{}",
		"trailing comma":      repl(`"count": 1}`, `"count": 1,}`),
		"byte order mark":     "\ufeff" + base,
		"invalid UTF-8":       repl(`"name": "t"`, "\"name\": \"t\xff\""),
		"control character":   repl(`"name": "t"`, "\"name\": \"t\x01\""),
		"src and srcs":        repl(`"src": {"buf": "i", "off": 0}`, `"src": {"buf": "i", "off": 0}, "srcs": []`),
		"no count":            repl(`, "count": 1`, ``),
		"no op":               repl(`"op": "copy", `, ``),
		"unknown op":          repl(`"op": "copy"`, `"op": "cpy"`),
		"unknown field":       repl(`"count": 1`, `"count": 1, "x": 0`),
		"ref without off":     repl(`{"buf": "i", "off": 0}`, `{"buf": "i"}`),
		"bad buffer":          repl(`{"buf": "i", "off": 0}`, `{"buf": "q", "off": 0}`),
		"rank and id": repl(`"ranks": [
    {`, `"ranks": [
    {"rank": 0, "id": 0, `),
		"wrong rank id": repl(`"ranks": [
    {`, `"ranks": [
    {"rank": 1, `),
		"missing protocol":       repl(`, "protocol": "simple"`, ``),
		"rooted without root":    repl(`"allreduce"`, `"broadcast"`),
		"number as string field": repl(`"name": "t"`, `"name": 5`),
		"truncated":              base[:len(base)/2],
		"empty":                  "",
		"array document":         "[]",
	} {
		if _, ok := parseFast("t.json", []byte(in), defaultLimits); ok {
			t.Errorf("%s: the fast path accepted it", name)
		}
		agree(t, name, []byte(in))
	}
	// Valid documents that are no less plain are taken, and agree: -0, an
	// empty meta, empty lists, string refs, spelled-out buffers.
	for name, in := range map[string]string{
		"minus zero":    repl(`"off": 0}, "dst"`, `"off": -0}, "dst"`),
		"empty meta":    repl(`"name": "t"`, `"name": "t", "meta": {}`),
		"empty srcs":    repl(`"src": {"buf": "i", "off": 0}`, `"srcs": []`),
		"string ref":    repl(`{"buf": "i", "off": 0}`, `"i[0]"`),
		"long buf name": repl(`{"buf": "i", "off": 0}`, `{"buf": "Input", "off": 0}`),
		"CRLF":          strings.ReplaceAll(base, "\n", "\r\n"),
		"tabs":          strings.ReplaceAll(base, "  ", "\t"),
		"compact":       strings.Join(strings.Fields(base), ""),
		"channel alias": repl(`"ranks": [
    {`, `"ranks": [
    {"channels": [{"peer": 0, "type": "SM"}], `),
		"collective alias": repl(`"allreduce"`, `"all_reduce"`),
	} {
		if !agree(t, name, []byte(in)) {
			_, ds := parseCareful("t.json", []byte(in), defaultLimits)
			t.Errorf("%s: the fast path gave up (careful: %v)", name, ds)
		}
	}
}

// TestParseFastLimits: over a size limit the fast path gives up, at the
// limit it agrees.
func TestParseFastLimits(t *testing.T) {
	data := []byte(richDoc)
	p, _ := parseCareful("rich", data, defaultLimits)
	nops, nch, ntb := p.NumOps(), 0, 0
	for _, r := range p.Ranks {
		nch += len(r.Channels)
		ntb += len(r.TBs)
	}
	at := limits{input: len(data), ranks: 2, ops: nops, channels: nch, tbs: ntb, list: 2}
	if !agreeLim(t, "at the limits", data, at) {
		t.Error("the fast path gave up at the limits")
	}
	for name, lim := range map[string]limits{
		"input":    {len(data) - 1, 2, nops, nch, ntb, 2},
		"ranks":    {len(data), 1, nops, nch, ntb, 2},
		"ops":      {len(data), 2, nops - 1, nch, ntb, 2},
		"channels": {len(data), 2, nops, nch - 1, ntb, 2},
		"tbs":      {len(data), 2, nops, nch, ntb - 1, 2},
		"list":     {len(data), 2, nops, nch, ntb, 1},
	} {
		if _, ok := parseFast("rich", data, lim); ok {
			t.Errorf("over the %s limit: the fast path accepted it", name)
		}
		if _, ds := parse("rich", data, lim); len(ds) == 0 {
			t.Errorf("over the %s limit: no diagnostic", name)
		}
	}
}

// mutants calls f with every single-byte deletion, a set of single-byte
// replacements and insertions of data.
func mutants(data []byte, f func(m []byte)) {
	const alphabet = "\"{}[],:0-19e. \n\\ntfx\x80\xff"
	m := make([]byte, 0, len(data)+1)
	for i := range data {
		m = append(append(m[:0], data[:i]...), data[i+1:]...)
		f(m)
		for j := 0; j < len(alphabet); j++ {
			c := alphabet[j]
			if c != data[i] {
				m = append(append(append(m[:0], data[:i]...), c), data[i+1:]...)
				f(m)
			}
			if i%3 == 0 {
				m = append(append(append(m[:0], data[:i]...), c), data[i:]...)
				f(m)
			}
		}
	}
}

// TestParseFastMutations runs the fast and the careful path on every
// small mutation of two documents: whenever the fast path accepts, the
// careful path accepts the same program.
func TestParseFastMutations(t *testing.T) {
	srcs := map[string]string{"doc": doc("", "", "", "")}
	if !testing.Short() {
		srcs["rich"] = richDoc
	}
	for name, src := range srcs {
		n, taken := 0, 0
		mutants([]byte(src), func(m []byte) {
			n++
			if agree(t, name, m) {
				taken++
			}
		})
		t.Logf("%s: %d mutants, %d taken by the fast path", name, n, taken)
		if taken == 0 {
			t.Errorf("%s: the fast path took no mutant", name)
		}
	}
}

// FuzzParseFast: whatever the input, the fast path either gives up or
// builds exactly the careful path's program.
//
// Seeds: testdata/fuzz/FuzzParseFast, the rich document and the examples.
func FuzzParseFast(f *testing.F) {
	f.Add([]byte(richDoc))
	f.Add([]byte(doc("", "", "", "")))
	files, _ := filepath.Glob(filepath.Join(repoRoot, "examples", "*.json"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		agree(t, "fuzz.json", data)
	})
}

// BenchmarkParseRing64Gen is Parse of compiler/gen's 64-rank ring
// allreduce (the file `theseusc gen ring --nranks 64` writes, 595 KB).
func BenchmarkParseRing64Gen(b *testing.B) {
	benchParseGen(b, 64)
}

// BenchmarkParseRing1024Gen is the same at 1024 ranks (151 MB, 2.1 M ops).
func BenchmarkParseRing1024Gen(b *testing.B) {
	if testing.Short() {
		b.Skip("151 MB")
	}
	benchParseGen(b, 1024)
}

func benchParseGen(b *testing.B, n int) {
	p, err := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: n})
	if err != nil {
		b.Fatal(err)
	}
	data, err := Format(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ds := Parse("ring.json", data); len(ds) != 0 {
				b.Fatal(ds)
			}
		}
	})
	b.Run("careful", func(b *testing.B) {
		if n > 64 {
			b.Skip("minutes")
		}
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ds := parseCareful("ring.json", data, defaultLimits); len(ds) != 0 {
				b.Fatal(ds)
			}
		}
	})
}
