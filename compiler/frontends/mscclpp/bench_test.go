package mscclpp

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ringPlan writes a v0.8+ allgather plan on n ranks where rank r puts its
// block to rank r+1 over a memory channel: 2 ops per rank, 2 channel ends
// per rank.
func ringPlan(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"name": "ring", "collective": "allgather", "protocol": "Simple", "inplace": false, "gpus": [`)
	for r := 0; r < n; r++ {
		if r > 0 {
			b.WriteString(",")
		}
		next, prev := (r+1)%n, (r+n-1)%n
		fmt.Fprintf(&b, `{"id": %d, "input_chunks": 1, "output_chunks": %d, "scratch_chunks": 0,
 "channels": [{"channel_type": "memory", "connected_to": [%d, %d]}],
 "remote_buffers": [{"rank": %d, "type": "o", "access_channel_types": ["memory"]}],
 "threadblocks": [{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}],
   "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}],
   "ops": [{"name": "put", "src_buff": [{"type": "i", "index": 0, "size": 1}], "dst_buff": [{"buffer_id": 0, "index": %d, "size": 1}], "channel_type": "memory"},
           {"name": "signal", "channel_ids": [0], "channel_type": "memory"}]}]}`, r, n, next, prev, next, r)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// BenchmarkParseManyRanks measures Parse on ring plans of growing size; the
// time per rank stays flat (channel filling and pairing are linear).
func BenchmarkParseManyRanks(b *testing.B) {
	for _, n := range []int{64, 1024, 8192} {
		data := ringPlan(n)
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if p, ds := Parse("ring.json", data); p == nil {
					b.Fatal(ds)
				}
			}
		})
	}
}

// BenchmarkParseCorpus measures Parse on each plan of the shared corpus.
func BenchmarkParseCorpus(b *testing.B) {
	dir := filepath.Join("..", "..", "..", "..", "shared", "corpus", "mscclpp-json")
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	if len(files) == 0 {
		b.Skip("corpus not found")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Base(f), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				Parse(f, data)
			}
		})
	}
}
