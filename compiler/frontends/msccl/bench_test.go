package msccl

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importtest"
)

// ringAllGather writes an MSCCL allgather on n gpus where gpu r sends its
// block to r+1 and receives r-1's: one threadblock per direction.
func ringAllGather(n int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `<algo name="ring" proto="Simple" nchannels="1" nchunksperloop="%d" ngpus="%d" coll="allgather" inplace="0" outofplace="1">`+"\n", n, n)
	for r := 0; r < n; r++ {
		fmt.Fprintf(&b, `<gpu id="%d" i_chunks="1" o_chunks="%d" s_chunks="0"><tb id="0" send="%d" recv="-1" chan="0">%s</tb><tb id="1" send="-1" recv="%d" chan="0">%s</tb></gpu>`+"\n",
			r, n, (r+1)%n, st(0, "s", "i", 0, "o", 0, 1, -1, -1, 0), (r+n-1)%n, st(0, "r", "i", 0, "o", (r+n-1)%n, 1, -1, -1, 0))
	}
	b.WriteString("</algo>\n")
	return []byte(b.String())
}

// BenchmarkParseManyRanks measures Parse on ring allgathers of growing
// size; the time per rank stays flat.
func BenchmarkParseManyRanks(b *testing.B) {
	importtest.BenchSizes(b, Parse, "ring.xml", ringAllGather)
}

// BenchmarkParseCorpus measures Parse on each XML file of the shared corpus.
func BenchmarkParseCorpus(b *testing.B) {
	importtest.BenchFiles(b, Parse, filepath.Join("msccl-xml", "*.xml"))
}
