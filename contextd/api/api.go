// Package api is the HTTP API of theseus-contextd (docs/contextd.md, "The
// API"): the request and reply bodies, as JSON, shared by the daemon
// (contextd), its client (contextd/client) and the no-daemon mode of
// theseus-context (contextd/publish). The API is plain HTTP/1.1 with JSON
// bodies, served on a unix socket (owner-only, mode 0600) by default and
// optionally on TCP with TLS and a bearer token:
//
//	POST /v1/contexts/{context}/attributes   AttrRequest  -> Published
//	POST /v1/contexts/{context}/schedules    SchedRequest -> Published
//	POST /v1/contexts/{context}/values       ValueRequest -> Published
//	GET  /v1/contexts/{context}              -> Context
//	GET  /v1/contexts                        -> []string (the names)
//	GET  /v1/status                          -> Status (every node of the cluster)
//	GET  /metrics                            Prometheus text format
//
// A rejected request gets a 4xx status and an Error body; 503 means the
// replicated log is not available (no quorum yet, or the daemon is
// starting), and the request may be retried.
package api

import (
	"fmt"
	"regexp"

	"github.com/theseus-ccl/theseus/diag"
)

// Prefix of every versioned path.
const Prefix = "/v1"

// DefaultContext is the context a command addresses without --context; the
// daemon materialises it in <contexts>/default, which is the runtime's
// default THESEUS_SELECTION_CONTEXT ($HOME/.theseus/contexts/default).
const DefaultContext = "default"

var contextName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// CheckContext rejects a context name that is not 1 to 64 letters, digits,
// '_' or '-' starting with a letter or digit: a name is a directory under
// the daemon's contexts root and a token of a NATS subject, so it can
// neither hold a path separator or "..", nor a '.' or a wildcard.
func CheckContext(name string) error {
	if !contextName.MatchString(name) {
		return fmt.Errorf("context name %q: want 1 to 64 letters, digits, '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// Entry kinds: the file of the context an entry is appended to.
const (
	KindAttr  = "attr"  // attribute_manifest.jsonl
	KindSched = "sched" // schedule_manifest.jsonl (and a schedule file)
	KindValue = "value" // <attribute>.jsonl
)

// ValidAfter forms accepted by every request's valid_after: "" is the
// default, now plus the configured propagation margin; "+DURATION"
// (Go syntax: "+0s", "+500ms", "+2m") is that long after now; "always"
// writes no valid_after (valid at once, as a hand-written line without
// one); anything else is a time as the manifests accept it
// (manifest.ParseTime: Unix seconds, RFC 3339 with a zone, or local
// standard time).
const ValidAlways = "always"

// AttrRequest declares an attribute (theseus-context new attr).
type AttrRequest struct {
	Name   string `json:"name"`
	Origin string `json:"origin"`         // endo or exo
	Type   string `json:"type,omitempty"` // int, float, bool or vector; endo: int (the default)
	Path   string `json:"path,omitempty"` // endo: one of the request.* paths
	// Default is an exo attribute's value until its log gives one, written
	// as a value is (ValueRequest.Value); "" is the type's zero.
	Default     string `json:"default,omitempty"`
	ValidAfter  string `json:"valid_after,omitempty"`
	Description string `json:"description,omitempty"`
	// PublicationID, when set, identifies the publication: a request sent
	// again with the same id (after a lost answer) is not published twice
	// (CheckPublicationID; docs/contextd.md §2).
	PublicationID string `json:"publication_id,omitempty"`
}

// SchedRequest publishes a schedule (theseus-context new sched).
type SchedRequest struct {
	// FileName is the schedule file's name as the user gave it: only its
	// extension (.json, .xml, .tsb or .tir) and base name are used; the
	// file is stored as schedules/<sha256><ext> in the context.
	FileName string `json:"file_name"`
	File     []byte `json:"file"` // the file's bytes (base64 in JSON)
	// Collective is required and must be the file's; NRanks 0 takes the
	// file's.
	Collective  string `json:"collective"`
	NRanks      int    `json:"nranks,omitempty"`
	NLocalRanks int    `json:"nlocalranks,omitempty"`
	MinBytes    int64  `json:"min_bytes,omitempty"`
	MaxBytes    int64  `json:"max_bytes,omitempty"`
	InPlace     *bool  `json:"inplace,omitempty"`
	OutOfPlace  *bool  `json:"outofplace,omitempty"`
	// Usable and Preference are policy expressions ("" : "true" and "0").
	Usable     string `json:"usable,omitempty"`
	Preference string `json:"preference,omitempty"`
	Replaces   *int   `json:"replaces,omitempty"`
	ValidAfter string `json:"valid_after,omitempty"`
	Name       string `json:"name,omitempty"` // default: the file's base name without extension
	Comment    string `json:"comment,omitempty"`
	// Gen names a built-in generator (compiler/gen) instead of a file: a
	// generated-schedule entry, "gen": ALGO (docs/selection-context.md
	// §5, issue 20), whose program the runtime builds for the
	// communicator's shape. File and FileName are then empty; NRanks 0
	// serves any world size the generator supports. Protocol ("simple",
	// "ll"), Channels (an integer or a policy expression over nranks and
	// nlocalranks) and Avoid (ranks kept off relaying paths) are its
	// parameters, each left out when empty.
	Gen      string `json:"gen,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Channels string `json:"channels,omitempty"`
	Avoid    []int  `json:"avoid,omitempty"`
	// PublicationID: as AttrRequest's.
	PublicationID string `json:"publication_id,omitempty"`
}

// ValueRequest appends a value to an exogenous attribute's log
// (theseus-context set).
type ValueRequest struct {
	Name string `json:"name"`
	// Value is written as on the command line: an int ("3", "-1"), a float
	// ("2.5", "1e6"), a bool ("true", "false") or a vector ("[1, 2.5]" or
	// "1,2.5"); it must be of the attribute's declared type.
	Value      string `json:"value"`
	ValidAfter string `json:"valid_after,omitempty"`
	Comment    string `json:"comment,omitempty"`
	// PublicationID: as AttrRequest's.
	PublicationID string `json:"publication_id,omitempty"`
}

// Published is the reply to a publication that was accepted.
type Published struct {
	Context string `json:"context"`
	Kind    string `json:"kind"`
	// Seq is the entry's sequence number in the replicated log (0 in
	// --local mode).
	Seq uint64 `json:"seq"`
	// ID is the entry's position in its file: a schedule's id, an
	// attribute's entry, a value's line (0-based).
	ID   int    `json:"id"`
	Line string `json:"line"`           // the line appended, without its newline
	File string `json:"file,omitempty"` // a schedule's file in the context
	// ValidAfter is the entry's valid_after, RFC 3339 (UTC), "" for none.
	ValidAfter string `json:"valid_after,omitempty"`
	// Applied reports that this node's context directory held the entry
	// when the reply was sent (always true in --local mode). A publication
	// acknowledged with Applied false is in the replicated log and will be
	// applied; the node was slow or its materialiser is failing (status).
	Applied bool `json:"applied"`
	// PublicationID is the request's, and Duplicate reports that the log
	// already held a publication with that id: nothing was added, and the
	// reply describes the entry logged the first time (Line, Seq, ID).
	PublicationID string `json:"publication_id,omitempty"`
	Duplicate     bool   `json:"duplicate,omitempty"`
}

var publicationID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckPublicationID rejects a publication id that is not 1 to 64 letters,
// digits, '_' or '-'. The daemon uses it as the log entry's JetStream
// message id: within the log's duplicate window (2 minutes) a second
// publication with the same id is dropped, and after it as long as the
// node remembers the entry (its last 8192 entries since it started).
func CheckPublicationID(id string) error {
	if !publicationID.MatchString(id) {
		return fmt.Errorf("publication id %q: want 1 to 64 letters, digits, '_' or '-'", id)
	}
	return nil
}

// Rejection reasons (Error.Reason), also the reason label of the
// rejections metric.
const (
	ReasonBadRequest       = "bad_request"       // malformed body, missing or contradictory fields
	ReasonBadName          = "bad_name"          // context, attribute or file name; traversal
	ReasonTooLarge         = "too_large"         // a size limit
	ReasonInvalidSchedule  = "invalid_schedule"  // the file fails to parse or verify, or contradicts the entry
	ReasonBadExpression    = "bad_expression"    // a policy expression fails to parse or type-check
	ReasonUnknownAttribute = "unknown_attribute" // set of an attribute not declared
	ReasonWrongType        = "wrong_type"        // a value not of the attribute's type
	ReasonDuplicate        = "duplicate"         // an attribute declared again
	ReasonBadReplaces      = "bad_replaces"      // replaces an id that does not exist
	ReasonNotEmpty         = "not_empty"         // init of a context that has entries
	ReasonUnauthorized     = "unauthorized"      // TCP without the token
	// ReasonUnavailable is a 503's: the replicated log is not available (no
	// quorum, the daemon starting or stopping); the request may be retried.
	ReasonUnavailable = "unavailable"
)

// Error is the body of a rejection (4xx) or failure (5xx).
type Error struct {
	Reason      string            `json:"reason"`
	Message     string            `json:"message"`
	Diagnostics []diag.Diagnostic `json:"diagnostics,omitempty"`
}

func (e *Error) Error() string {
	s := e.Message
	for i, d := range e.Diagnostics {
		if i == 5 {
			s += fmt.Sprintf("\n  ... and %d more", len(e.Diagnostics)-5)
			break
		}
		s += "\n  " + d.String()
	}
	return s
}

// Context is a context's entries as one node holds them (list, show).
type Context struct {
	Name       string      `json:"name"`
	Dir        string      `json:"dir"`
	Attributes []Attribute `json:"attributes"`
	Schedules  []Schedule  `json:"schedules"`
}

// Attribute is one attribute manifest entry.
type Attribute struct {
	ID          int    `json:"id"`
	Name        string `json:"name,omitempty"`
	Type        string `json:"type,omitempty"`
	Origin      string `json:"origin,omitempty"`
	Path        string `json:"path,omitempty"`
	Default     string `json:"default,omitempty"`
	Value       string `json:"value,omitempty"` // exo: the last value logged ("" when none)
	Values      int    `json:"values"`          // exo: lines in the value log
	ValidAfter  string `json:"valid_after,omitempty"`
	Description string `json:"description,omitempty"`
	Line        string `json:"line"`
	Invalid     string `json:"invalid,omitempty"` // why the runtime ignores the line
}

// Schedule is one schedule manifest entry.
type Schedule struct {
	ID   int    `json:"id"`
	Name string `json:"name,omitempty"`
	File string `json:"file,omitempty"`
	// Gen is a generated entry's generator ("ring", ...; "p2p" for the
	// point-to-point engine's parameters), "" for an entry with a file.
	Gen        string `json:"gen,omitempty"`
	Collective string `json:"collective,omitempty"`
	// NRanks is the entry's nranks (0: any).
	NRanks      int    `json:"nranks,omitempty"`
	Usable      string `json:"usable,omitempty"`
	Preference  string `json:"preference,omitempty"`
	Precompiled bool   `json:"precompiled"`
	Replaces    int    `json:"replaces"` // -1: none
	ValidAfter  string `json:"valid_after,omitempty"`
	Line        string `json:"line"`
	Invalid     string `json:"invalid,omitempty"`
}

// Status is the state of every node of the cluster (theseus-context
// status): those that answered, and those the cluster knows that did not
// (Node.Down).
type Status struct {
	// Last is the replicated log's last sequence number, as the answering
	// node's replica of the log knows it (0 when unknown).
	Last  uint64 `json:"last"`
	Nodes []Node `json:"nodes"`
	// Unnamed counts further nodes the cluster knows by id only (not heard
	// from since the whole cluster restarted): down as far as this node can
	// tell.
	Unnamed int `json:"unnamed,omitempty"`
}

// Node is one daemon's state.
type Node struct {
	Node string `json:"node"`
	// Applied is the sequence of the last log entry this node has applied
	// to its context directories (fsynced and recorded).
	Applied uint64 `json:"applied"`
	// Lag is Last (the log's, as this node knows it) minus Applied.
	Lag      uint64   `json:"lag"`
	Last     uint64   `json:"last"`
	Contexts []string `json:"contexts"`
	Root     string   `json:"root"` // the contexts root directory
	Replicas int      `json:"replicas"`
	Cluster  string   `json:"cluster,omitempty"` // "" single node
	// Error is what stops this node's materialiser or log access now, or "".
	Error string `json:"error,omitempty"`
	// Down: the node did not answer the answering node's request (it is
	// down, or unreachable from there). Applied, Lag and Contexts are then
	// its last answer's (Applied 0 when it never answered that node), and
	// LastSeen when that was (RFC 3339, UTC; "" for never).
	Down     bool   `json:"down,omitempty"`
	LastSeen string `json:"last_seen,omitempty"`
}
