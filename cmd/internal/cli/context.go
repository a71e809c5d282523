package cli

import (
	"os"
	"path/filepath"

	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// CheckContextDir is a usage error unless dir holds a manifest of a
// selection context (attribute_manifest.jsonl or schedule_manifest.jsonl):
// theseusc lint and select, and theseus-bench, refuse a directory that is
// not a context the same way (exit 2).
func CheckContextDir(dir string) error {
	_, e1 := os.Stat(filepath.Join(dir, manifest.AttributeManifest))
	_, e2 := os.Stat(filepath.Join(dir, manifest.ScheduleManifest))
	if e1 != nil && e2 != nil {
		return Usagef("%s is a directory without %s or %s: not a selection context", dir, manifest.AttributeManifest, manifest.ScheduleManifest)
	}
	return nil
}
