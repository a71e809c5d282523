package mscclpp

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importtest"
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
	importtest.BenchSizes(b, Parse, "ring.json", ringPlan)
}

// BenchmarkParseCorpus measures Parse on each plan of the shared corpus.
func BenchmarkParseCorpus(b *testing.B) {
	importtest.BenchFiles(b, Parse, filepath.Join("mscclpp-json", "*", "*.json"))
}
