package publish

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// ParseValue reads a value as theseus-context takes it on the command line
// (api.ValueRequest.Value, api.AttrRequest.Default) for an attribute of
// type t and returns it as the JSON value a log line holds:
//
//   - int: a decimal integer in the int64 range ("3", "-1");
//   - float: a finite number ("2.5", "1e6", "3");
//   - bool: "true" or "false";
//   - vector: a JSON array of finite numbers ("[1, 2.5]") or the same
//     numbers without brackets ("1,2.5"; "" or "[]" is empty), at most
//     maxVec of them (0: policy.DefaultMaxVectorLen).
//
// Leading and trailing space is ignored. The error says what was wrong.
func ParseValue(s string, t bc.Type, maxVec int) (json.RawMessage, error) {
	s = strings.TrimSpace(s)
	if maxVec <= 0 {
		maxVec = policy.DefaultMaxVectorLen
	}
	switch t {
	case bc.Int:
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not an int (a decimal integer in the int64 range)", s)
		}
		return json.RawMessage(strconv.FormatInt(v, 10)), nil
	case bc.Float:
		v, err := finite(s)
		if err != nil {
			return nil, err
		}
		return json.RawMessage(strconv.FormatFloat(v, 'g', -1, 64)), nil
	case bc.Bool:
		if s != "true" && s != "false" {
			return nil, fmt.Errorf("%q is not a bool (true or false)", s)
		}
		return json.RawMessage(s), nil
	case bc.Vector:
		body := s
		if strings.HasPrefix(s, "[") {
			if !strings.HasSuffix(s, "]") || len(s) < 2 {
				return nil, fmt.Errorf("%q is not a vector: an opening [ without its ]", s)
			}
			body = s[1 : len(s)-1]
		}
		var parts []string
		if strings.TrimSpace(body) != "" {
			parts = strings.Split(body, ",")
		}
		if len(parts) > maxVec {
			return nil, fmt.Errorf("a vector of %d elements is over THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH=%d", len(parts), maxVec)
		}
		out := []byte{'['}
		for i, p := range parts {
			v, err := finite(strings.TrimSpace(p))
			if err != nil {
				return nil, fmt.Errorf("vector element %d: %w", i, err)
			}
			if i > 0 {
				out = append(out, ',')
			}
			out = strconv.AppendFloat(out, v, 'g', -1, 64)
		}
		return append(out, ']'), nil
	}
	return nil, fmt.Errorf("no values for type %s", t)
}

func finite(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a finite number", s)
	}
	return v, nil
}

// ResolveValidAfter turns a request's valid_after (api.ValidAlways and the
// forms it documents) into Unix nanoseconds, or manifest.Always for
// "always". now is the publisher's clock, margin the default's distance
// from it. Errors: a form that is none of these, or a time outside
// 1678-2261.
func ResolveValidAfter(s string, now time.Time, margin time.Duration) (int64, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return now.Add(margin).Round(time.Millisecond).UnixNano(), nil
	case s == api.ValidAlways:
		return manifest.Always, nil
	case strings.HasPrefix(s, "+"):
		d, err := time.ParseDuration(s[1:])
		if err != nil || d < 0 || d > 100*365*24*time.Hour {
			return 0, fmt.Errorf("valid_after %q: want +DURATION such as +0s, +500ms or +2m, at most 100 years", s)
		}
		return now.Add(d).Round(time.Millisecond).UnixNano(), nil
	}
	ns, err := manifest.ParseTime(s, time.Local)
	if err != nil {
		return 0, fmt.Errorf("valid_after: %v (or use +DURATION, or %q)", err, api.ValidAlways)
	}
	return ns, nil
}

// FormatValidAfter is the JSON value of valid_after ns in a line: Unix
// seconds, as a decimal with as many fraction digits as ns needs (exact to
// the nanosecond when read back as a decimal; the runtime reads it to a
// few hundred nanoseconds). ok is false for manifest.Always (no field).
func FormatValidAfter(ns int64) (raw json.RawMessage, ok bool) {
	if ns == manifest.Always {
		return nil, false
	}
	sign := ""
	u := uint64(ns)
	if ns < 0 {
		sign, u = "-", uint64(-ns)
	}
	s := fmt.Sprintf("%s%d.%09d", sign, u/1e9, u%1e9)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return json.RawMessage(s), true
}

// rfc3339 renders ns for replies and listings ("" for manifest.Always).
func rfc3339(ns int64) string {
	if ns == manifest.Always {
		return ""
	}
	// valid_after is read back from a decimal of seconds (a float64):
	// show it to the microsecond.
	return time.Unix(0, ns).Round(time.Microsecond).UTC().Format(time.RFC3339Nano)
}
