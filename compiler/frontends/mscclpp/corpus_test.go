package mscclpp

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/diag"
	"github.com/theseus-ccl/theseus/ir"
)

var update = flag.Bool("update", false, "rewrite the golden summaries in testdata/golden")

// summary is what the corpus test pins for each file: the shape of the
// imported program and every diagnostic.
type summary struct {
	Name           string            `json:"name,omitempty"`
	Collective     string            `json:"collective,omitempty"`
	Protocol       string            `json:"protocol,omitempty"`
	NRanks         int               `json:"nranks,omitempty"`
	Root           int               `json:"root,omitempty"`
	ChunksPerBlock int64             `json:"chunks_per_block,omitempty"`
	InPlace        bool              `json:"inplace,omitempty"`
	OutOfPlace     bool              `json:"outofplace,omitempty"`
	MinBytes       int64             `json:"min_bytes,omitempty"`
	MaxBytes       int64             `json:"max_bytes,omitempty"`
	NumThreads     int               `json:"num_threads,omitempty"`
	SliceBytes     int64             `json:"slice_bytes,omitempty"`
	TBs            []int             `json:"tbs,omitempty"`      // per rank
	Channels       []int             `json:"channels,omitempty"` // per rank
	Chunks         [][3]int64        `json:"chunks,omitempty"`   // per rank: input, output, scratch
	Ops            map[string]int    `json:"ops,omitempty"`      // per opcode, all ranks
	Deps           int               `json:"deps,omitempty"`
	Publish        int               `json:"publish,omitempty"`
	MaxSrcs        int               `json:"max_srcs,omitempty"` // widest reduction
	RemoteRefs     int               `json:"remote_refs,omitempty"`
	PacketRefs     int               `json:"packet_refs,omitempty"`
	Unpaired       int               `json:"unpaired,omitempty"` // channel ends without a peer end
	Meta           map[string]string `json:"meta,omitempty"`
	Diagnostics    []string          `json:"diagnostics,omitempty"`
}

func summarize(p *ir.Program, ds []diag.Diagnostic) summary {
	var s summary
	for _, d := range ds {
		subj := d.Subject()
		if subj != "" {
			subj += ": "
		}
		s.Diagnostics = append(s.Diagnostics, fmt.Sprintf("%d:%d %s[%s] %s%s", d.Line, d.Col, d.Severity, d.Code, subj, d.Msg))
	}
	if p == nil {
		return s
	}
	s.Name, s.Collective, s.Protocol = p.Name, p.Collective.String(), p.Protocol.String()
	s.NRanks, s.Root, s.ChunksPerBlock = p.NRanks, p.Root, p.ChunksPerBlock
	s.InPlace, s.OutOfPlace, s.MinBytes, s.MaxBytes = p.InPlace, p.OutOfPlace, p.MinBytes, p.MaxBytes
	s.NumThreads, s.SliceBytes = p.NumThreads, p.SliceBytes
	s.Ops = map[string]int{}
	s.Meta = p.Meta
	for ri, r := range p.Ranks {
		for _, c := range r.Channels {
			if c.Peer < 0 || c.Peer >= len(p.Ranks) || c.PeerChannel < 0 || c.PeerChannel >= len(p.Ranks[c.Peer].Channels) {
				s.Unpaired++
				continue
			}
			if back := p.Ranks[c.Peer].Channels[c.PeerChannel]; back.Peer != ri || back.Type != c.Type {
				s.Unpaired++
			}
		}
		s.TBs = append(s.TBs, len(r.TBs))
		s.Channels = append(s.Channels, len(r.Channels))
		s.Chunks = append(s.Chunks, r.Chunks)
		for _, tb := range r.TBs {
			for _, op := range tb.Ops {
				s.Ops[op.Code.String()]++
				s.Deps += len(op.Deps)
				if op.Publish {
					s.Publish++
				}
				s.MaxSrcs = max(s.MaxSrcs, len(op.Srcs))
				for _, ref := range append(append([]ir.Ref(nil), op.Srcs...), op.Dsts...) {
					if ref.Chan >= 0 {
						s.RemoteRefs++
					}
					if ref.Packet {
						s.PacketRefs++
					}
				}
			}
		}
	}
	return s
}

// corpusDir finds ../shared/corpus relative to the repository root (the
// directory holding go.mod).
func corpusDir(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("no go.mod above the test directory")
		}
		dir = parent
	}
	c := filepath.Join(dir, "..", "shared", "corpus")
	if _, err := os.Stat(c); err != nil {
		t.Skipf("corpus not found at %s (../shared/corpus relative to the repository): %v", c, err)
	}
	return c
}

// TestCorpus imports every MSCCL++ plan of the shared corpus (v0.7 and v0.8plus) and compares
// its summary with testdata/golden/<file>.json (go test -update rewrites
// them). Every file must import without errors, or be rejected with the
// diagnostics its golden file lists.
func TestCorpus(t *testing.T) {
	dir := filepath.Join(corpusDir(t), "mscclpp-json")
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files in %s: %v", dir, err)
	}
	sort.Strings(files)
	for _, f := range files {
		base := filepath.Base(f)
		dialectDir := filepath.Base(filepath.Dir(f))
		t.Run(base, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, ds := Parse(base, data)
			got := summarize(p, ds)
			golden := filepath.Join("testdata", "golden", dialectDir, base)
			if *update {
				var b strings.Builder
				enc := json.NewEncoder(&b)
				enc.SetEscapeHTML(false)
				enc.SetIndent("", "  ")
				if err := enc.Encode(got); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			var want summary
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("summary (-want +got):\n%s", d)
			}
			// The dialect directory and the detected dialect agree.
			if p != nil && (dialectDir == "v0.7") != (p.Meta["mscclpp.dialect"] == "v0.7") {
				t.Errorf("file in %s detected as %s", dialectDir, p.Meta["mscclpp.dialect"])
			}
		})
	}
}
