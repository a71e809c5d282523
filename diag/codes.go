package diag

// Code is a stable diagnostic code. Codes never change meaning once
// released; docs/diagnostics.md lists them (a test keeps it current).
type Code string

// CodeInfo documents a code.
type CodeInfo struct {
	Code    Code
	Summary string
	Hint    string // the default one-line fix hint
}

// Frontend (parse and import) codes.
const (
	Syntax            Code = "TS0001" // malformed JSON/XML/text, or truncated input
	UnknownField      Code = "TS0002" // a field the format does not define
	BadValue          Code = "TS0003" // a field of the wrong type or out of its range
	MissingField      Code = "TS0004" // a required field is absent
	UnknownOp         Code = "TS0005" // an op name the format does not define
	BadVersion        Code = "TS0006" // an unsupported format version
	Unsupported       Code = "TS0007" // a feature Theseus does not run (e.g. NVLS)
	ProtocolMapped    Code = "TS0008" // a protocol mapped to the nearest supported one (LL128)
	ImportNote        Code = "TS0009" // informational note from an importer
	DuplicateID       Code = "TS0010" // ids not contiguous from 0, or repeated
	TooLarge          Code = "TS0011" // an input over a size limit (ranks, ops, bytes)
	UnknownCollective Code = "TS0012"
)

// Structural verification codes.
const (
	BadRank        Code = "TS0100" // rank index out of range or ranks missing
	BadTB          Code = "TS0101" // threadblock index out of range
	BadChannel     Code = "TS0102" // channel index out of range, or bad peer
	ChannelPairing Code = "TS0103" // channel ends do not pair on both sides
	ChunkRange     Code = "TS0104" // offset+count outside the buffer
	BadCount       Code = "TS0105" // count < 1 on a data op, or operand count wrong for the op
	MissingBuffer  Code = "TS0106" // buffer that does not exist on that rank (e.g. non-root output of reduce)
	BadRef         Code = "TS0107" // ref not allowed here (remote where local needed, packet outside scratch...)
	WrongLevel     Code = "TS0108" // transfer op where primitives are required, or vice versa
	BadGeometry    Code = "TS0109" // chunk counts that do not match the collective
	Limits         Code = "TS0110" // threadblock, channel or thread limits exceeded
	BadPeer        Code = "TS0111" // transfer op without the peer it needs
	BadBarrier     Code = "TS0112" // barrier ids/participants inconsistent
	BadWindow      Code = "TS0113" // message-size window empty or inverted
	BadRoot        Code = "TS0114" // root missing, out of range, or set on a non-rooted collective
	NoArrangement  Code = "TS0115" // neither in-place nor out-of-place supported
	PortOp         Code = "TS0116" // a port channel across nodes used for anything but a put of one local ref
	CrossNode      Code = "TS0117" // a memory channel between ranks of different nodes
)

// Synchronisation, ordering and semantic codes.
const (
	TransferMismatch Code = "TS0200" // sends and receives of a connection do not pair (count or number)
	SignalWait       Code = "TS0201" // signals and waits of a channel do not balance
	DepNotPublished  Code = "TS0202" // dependency on a step that does not publish
	BadDep           Code = "TS0203" // dependency on a missing tb/step, or on its own tb
	Deadlock         Code = "TS0204" // cycle in the cross-rank happens-before graph
	Race             Code = "TS0205" // conflicting accesses not ordered by happens-before
	RaceAcrossLaunch Code = "TS0206" // a race between consecutive slices or launches only
	Postcondition    Code = "TS0207" // the collective is not computed
	DoubleReduce     Code = "TS0208" // a contribution reduced more than once
	PacketReuse      Code = "TS0209" // an LL packet slot written twice in one launch
	UninitRead       Code = "TS0210" // read of a chunk that holds no defined value
	Unverifiable     Code = "TS0211" // custom collective: no postcondition to check
	RankLocalPolicy  Code = "TS0212" // policy uses a rank-local attribute (costs an agreement step)
	SharedChannel    Code = "TS0213" // a channel end used by more than one threadblock
	PeerAccessLate   Code = "TS0214" // a peer's access to a rank's input/output not ordered before that rank's launch completes
	PeerAccessEarly  Code = "TS0215" // a peer's access to a rank's input/output may run before that rank's launch starts
)

// Policy-expression codes (selection).
const (
	PolicySyntax    Code = "TS0300"
	PolicyUnknown   Code = "TS0301" // unknown attribute or function
	PolicyType      Code = "TS0302" // type error
	PolicyArity     Code = "TS0303" // wrong number of arguments
	PolicyVector    Code = "TS0304" // vector misuse, or over the maximum length
	PolicyEndoPath  Code = "TS0305" // endogenous path not among the supported twelve
	PolicyTooDeep   Code = "TS0306" // expression over the nesting or size limit
	PolicyConstFold Code = "TS0307" // constant folding found an error (e.g. division by zero)
)

// Codes lists every code with its summary and default hint, in code order.
var Codes = []CodeInfo{
	{Syntax, "the input is not well-formed (syntax error or truncated)", "fix the syntax at the position shown"},
	{UnknownField, "a field the format does not define", "remove the field or check its spelling"},
	{BadValue, "a field has the wrong type or is out of range", "use a value of the documented type and range"},
	{MissingField, "a required field is absent", "add the field"},
	{UnknownOp, "an op name the format does not define", "use one of the documented ops"},
	{BadVersion, "an unsupported format version", "set the version the docs name"},
	{Unsupported, "a feature Theseus does not run", "use a schedule without this feature"},
	{ProtocolMapped, "a protocol was mapped to the nearest supported one", "set proto to Simple or LL to silence this"},
	{ImportNote, "a note from an importer", ""},
	{DuplicateID, "ids are repeated or not contiguous from 0", "number ids 0, 1, 2, ... in order"},
	{TooLarge, "the input is over a size limit", "split the schedule or reduce its size"},
	{UnknownCollective, "an unknown collective name", "use allreduce, allgather, reducescatter, broadcast, reduce, alltoall, gather, scatter, sendrecv or custom"},
	{BadRank, "a rank index is out of range, or ranks are missing", "give exactly nranks ranks, numbered from 0"},
	{BadTB, "a threadblock index is out of range", "refer to an existing threadblock"},
	{BadChannel, "a channel index is out of range or names a bad peer", "refer to a declared channel"},
	{ChannelPairing, "the two ends of a channel do not pair", "declare the matching channel on the peer"},
	{ChunkRange, "an offset+count lies outside its buffer", "keep offset+count within the buffer's chunks"},
	{BadCount, "a count or an operand count is wrong for the op", "data ops move at least one chunk; check the op's operands"},
	{MissingBuffer, "the buffer does not exist on that rank", "only use buffers the collective gives this rank"},
	{BadRef, "a buffer reference is not allowed here", "check local/remote and packet use for this op"},
	{WrongLevel, "an op of the wrong IR level", "run the legalize pass first"},
	{BadGeometry, "chunk counts do not match the collective", "declare chunks consistent with chunks-per-block"},
	{Limits, "a threadblock, channel or thread limit is exceeded", "use fewer threadblocks or channels"},
	{BadPeer, "a transfer op lacks the peer it needs", "set the threadblock's send/recv peer"},
	{BadBarrier, "barrier participants are inconsistent", "give every participant the same id and count"},
	{BadWindow, "the message-size window is empty or inverted", "make minBytes <= maxBytes, or maxBytes 0 for unlimited"},
	{BadRoot, "the root is missing, out of range, or not applicable", "set root for rooted collectives only"},
	{NoArrangement, "neither in-place nor out-of-place is supported", "support at least one buffer arrangement"},
	{PortOp, "a port channel across nodes reads a peer's memory, or puts more than one local ref", "across nodes, put with one copy from a local ref to one remote ref of the same layout (packets to packets), and read only local memory"},
	{CrossNode, "a memory channel joins ranks of different nodes", "use a port channel between ranks of different nodes (the generators and the legaliser emit them for the program's nlocalranks)"},
	{TransferMismatch, "sends and receives of a connection do not pair", "match every send with a receive of the same count"},
	{SignalWait, "signals and waits of a channel do not balance", "make every wait consume exactly one signal"},
	{DepNotPublished, "a dependency names a step that does not publish", "set publish (hasdep) on the target step"},
	{BadDep, "a dependency names a missing threadblock or step", "refer to an existing step of another threadblock"},
	{Deadlock, "the cross-rank happens-before graph has a cycle", "reorder the ops named in the cycle"},
	{Race, "conflicting accesses are not ordered", "add a signal/wait or dependency between the two ops"},
	{RaceAcrossLaunch, "accesses race between consecutive slices or launches", "add a handshake before reusing the buffer"},
	{Postcondition, "the schedule does not compute its collective", "check the ops that produce the chunk shown"},
	{DoubleReduce, "a contribution is reduced more than once", "reduce each rank's contribution exactly once"},
	{PacketReuse, "an LL packet slot is written twice in one launch", "give every packet transfer its own scratch chunks"},
	{UninitRead, "a chunk is read before anything defines it", "write the chunk before reading it"},
	{Unverifiable, "a custom collective has no postcondition to check", "use a named collective to have it verified"},
	{RankLocalPolicy, "a policy uses a rank-local attribute", "avoid request.sendbuf/recvbuf in policies, or accept an agreement step"},
	{SharedChannel, "a channel end is used by more than one threadblock", "give each threadblock its own channels"},
	{PeerAccessLate, "a peer's access to a rank's input or output is not ordered before that rank's launch completes", "after the access, signal the owner, and have the owner wait for that signal before it finishes (a closing handshake)"},
	{PeerAccessEarly, "a peer's access to a rank's input or output may run before that rank's launch starts", "before the access, wait for a signal the owner sends when it starts (an opening handshake)"},
	{PolicySyntax, "a policy expression has a syntax error", "fix the expression at the position shown"},
	{PolicyUnknown, "an unknown attribute or function", "declare the attribute in the attribute manifest"},
	{PolicyType, "a policy expression has a type error", "convert the operands to matching types"},
	{PolicyArity, "a function got the wrong number of arguments", "check the function's signature"},
	{PolicyVector, "a vector is misused or too long", "index vectors, or use len/sum/minof/maxof/contains"},
	{PolicyEndoPath, "an endogenous path Theseus does not define", "use one of the twelve request.* paths"},
	{PolicyTooDeep, "an expression is over the nesting or size limit", "simplify the expression"},
	{PolicyConstFold, "constant folding found an error", "fix the constant sub-expression"},
}

// Lookup returns the documentation of a code.
func Lookup(c Code) (CodeInfo, bool) {
	for _, ci := range Codes {
		if ci.Code == c {
			return ci, true
		}
	}
	return CodeInfo{}, false
}
