package manifest

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Layouts of valid_after without a zone, read in local standard time.
var localLayouts = []string{
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04",
	"2006-01-02 15:04",
	"2006-01-02",
}

// StandardOffset returns the standard (non-DST) UTC offset of loc, in
// seconds, in the given year: the offset of January 1 or July 1, whichever
// is not daylight-saving time (January 1 when neither is).
func StandardOffset(loc *time.Location, year int) int {
	jan := time.Date(year, 1, 1, 12, 0, 0, 0, loc)
	jul := time.Date(year, 7, 1, 12, 0, 0, 0, loc)
	if jan.IsDST() && !jul.IsDST() {
		_, off := jul.Zone()
		return off
	}
	_, off := jan.Zone()
	return off
}

// ParseValidAfter reads a valid_after timestamp and returns Unix
// nanoseconds. A timestamp without a zone ("2025-06-01T12:00:00", also with
// a space, fractional seconds, no seconds, or a bare date) is local
// standard time: loc's standard offset all year round, so a timestamp is
// never ambiguous or skipped at a DST change (seed README). An RFC 3339
// timestamp with a zone (Z or ±hh:mm) is taken as given. Dates must lie in
// 1678–2261 (the int64 nanosecond range).
func ParseValidAfter(s string, loc *time.Location) (int64, error) {
	if loc == nil {
		loc = time.Local
	}
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return nanos(t)
	}
	for _, layout := range localLayouts {
		t, err := time.Parse(layout, s)
		if err != nil {
			continue
		}
		off := StandardOffset(loc, t.Year())
		return nanos(t.Add(-time.Duration(off) * time.Second))
	}
	return 0, fmt.Errorf("cannot read %q as a time (want 2006-01-02T15:04:05 in local standard time, or RFC 3339 with a zone)", s)
}

func nanos(t time.Time) (int64, error) {
	if t.Year() < 1678 || t.Year() > 2261 {
		return 0, fmt.Errorf("%s is outside 1678-2261", t.Format(time.RFC3339))
	}
	return t.UnixNano(), nil
}

// ParseTime reads a time written as valid_after may be
// (docs/selection-context.md §3): Unix seconds, a decimal number with an
// optional fraction, or a timestamp (ParseValidAfter). It returns Unix
// nanoseconds. Errors: text that is neither, or a time outside 1678–2261
// (the int64 nanosecond range), which is never wrapped around.
func ParseTime(s string, loc *time.Location) (int64, error) {
	s = strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return parseValidAfterRaw(json.RawMessage(s), loc)
	}
	return ParseValidAfter(s, loc)
}

// parseValidAfterRaw accepts a JSON string (ParseValidAfter) or a JSON
// number of Unix seconds (fractions allowed), within 1678–2261.
func parseValidAfterRaw(raw json.RawMessage, loc *time.Location) (int64, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return ParseValidAfter(s, loc)
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, fmt.Errorf("want a timestamp string or Unix seconds, got %s", raw)
	}
	outside := fmt.Errorf("%s seconds is outside 1678-2261", n)
	if i, err := n.Int64(); err == nil {
		if i > math.MaxInt64/1_000_000_000 || i < math.MinInt64/1_000_000_000 {
			return 0, outside
		}
		if _, err := nanos(time.Unix(i, 0).UTC()); err != nil {
			return 0, outside
		}
		return i * 1_000_000_000, nil
	}
	f, err := n.Float64()
	if err != nil || math.Abs(f) > math.MaxInt64/1e9 {
		return 0, outside
	}
	ns := int64(f * 1e9)
	if _, err := nanos(time.Unix(0, ns).UTC()); err != nil {
		return 0, outside
	}
	return ns, nil
}
