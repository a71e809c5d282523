package contextd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/publish"
)

// FuzzDecodeEntry: any log entry (subject and payload, as any NATS client
// with access could publish) is either refused with a reason or an entry
// that writes one line to a file inside its context's directory.
func FuzzDecodeEntry(f *testing.F) {
	h := strings.Repeat("ab", 32)
	for _, s := range [][2]string{
		{"theseus.context.default.value", `{"kind":"value","attr":"x","line":"{\"value\":1}"}`},
		{"theseus.context.default.attr", `{"kind":"attr","attr":"x","line":"{\"name\":\"x\",\"type\":\"int\",\"origin\":\"exo\"}"}`},
		{"theseus.context.c-1.sched", `{"kind":"sched","line":"{}","object":{"name":"` + h + `","path":"schedules/` + h + `.tsb","size":3}}`},
		{"theseus.context.default.value", `{"kind":"value","attr":"../x","line":"{}"}`},
		{"theseus.context...value", `{}`},
		{"theseus.context.default.sched", `{"kind":"sched","line":"{}","object":{"name":"` + h + `","path":"../../` + h + `.tsb"}}`},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		ctx, kind, e, why := decode(subject, data)
		if why != "" {
			return
		}
		if api.CheckContext(ctx) != nil || e.Kind != kind || strings.ContainsAny(e.Line, "\n\r") {
			t.Fatalf("decode(%q, %q) accepted %q %+v", subject, data, ctx, e)
		}
		for _, rel := range []string{e.File(), objPath(e)} {
			if rel == "" {
				continue
			}
			p := filepath.Join("/root", ctx, filepath.FromSlash(rel))
			if !strings.HasPrefix(p, filepath.Join("/root", ctx)+string(os.PathSeparator)) || strings.Contains(rel, "..") {
				t.Fatalf("decode(%q, %q): the entry writes %q, outside its context", subject, data, rel)
			}
		}
	})
}

func objPath(e *publish.Entry) string {
	if e.Object == nil {
		return ""
	}
	return e.Object.Path
}

// FuzzJournal: reading any checkpoint journal never panics.
func FuzzJournal(f *testing.F) {
	f.Add([]byte(`{"version":1,"seq":3,"sizes":{"c/a.jsonl":10},"attr_seq":{"c":1}}` + "\n" + `{"seq":5,"sizes":{"c/x.jsonl":4}}` + "\n"))
	f.Add([]byte(`{"version":1,"seq":1}` + "\n" + `{"seq":`))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), checkpointFile)
		os.WriteFile(p, b, 0o600)
		readJournal(p)
	})
}
