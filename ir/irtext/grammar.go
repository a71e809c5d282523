package irtext

import (
	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// The participle grammar of the textual IR (docs/ir-text.md has the EBNF).
// It is deliberately generic where the IR is: every op has the same shape
// (mnemonic, operands, "->" dsts, attributes), so any ir.Op, valid or not,
// has a text; the second phase (build.go) checks names, values and ids.
// Newlines are insignificant: attributes are keywords, and an identifier
// that is not one starts the next op.

var textLexer = lexer.MustSimple([]lexer.SimpleRule{
	{Name: "Comment", Pattern: `#[^\n]*`},
	{Name: "Whitespace", Pattern: `[ \t\r\n]+`},
	{Name: "String", Pattern: `"(?:\\.|[^"\\\n])*"`},
	{Name: "Int", Pattern: `[0-9]+`},
	{Name: "Ident", Pattern: `[A-Za-z_][A-Za-z0-9_]*`},
	{Name: "Arrow", Pattern: `->`},
	{Name: "Punct", Pattern: `[\[\]{}(),.=:@/+\-]`},
})

var textParser = participle.MustBuild[astFile](
	participle.Lexer(textLexer),
	participle.Elide("Comment", "Whitespace"),
	participle.UseLookahead(2),
)

// astNum is a signed decimal integer; the sign is a separate token so that
// "0+1" lexes as 0, +, 1.
type astNum struct {
	Pos    lexer.Position
	Neg    bool   `parser:"@\"-\"?"`
	Digits string `parser:"@Int"`
}

type astFile struct {
	Pos    lexer.Position
	Header *astHeader `parser:"@@"`
	Meta   []*astMeta `parser:"@@*"`
	Ranks  []*astRank `parser:"@@*"`
}

type astHeader struct {
	Pos        lexer.Position
	Name       string           `parser:"\"program\" @String"`
	Collective *astIdent        `parser:"@@"`
	Attrs      []*astHeaderAttr `parser:"@@*"`
}

type astHeaderAttr struct {
	Pos      lexer.Position
	Key      string    `parser:"(  @(\"nranks\" | \"chunks\" | \"root\" | \"nlocalranks\" | \"minbytes\" | \"maxbytes\" | \"threads\" | \"slicebytes\") \"=\""`
	Num      *astNum   `parser:"@@"`
	Protocol *astIdent `parser:"| \"protocol\" \"=\" @@"`
	Flag     string    `parser:"| @(\"inplace\" | \"outofplace\") )"`
}

type astIdent struct {
	Pos  lexer.Position
	Name string `parser:"@Ident"`
}

type astMeta struct {
	Pos   lexer.Position
	Key   string `parser:"\"meta\" @String \"=\""`
	Value string `parser:"@String"`
}

type astRank struct {
	Pos   lexer.Position
	ID    *astNum        `parser:"\"rank\" @@"`
	Attrs []*astKV       `parser:"@@*"`
	Items []*astRankItem `parser:"\"{\" @@* \"}\""`
}

// astKV is a rank or threadblock attribute: input/output/scratch or
// send/recv/chan = Int.
type astKV struct {
	Pos lexer.Position
	Key string  `parser:"@(\"input\" | \"output\" | \"scratch\" | \"send\" | \"recv\" | \"chan\") \"=\""`
	Num *astNum `parser:"@@"`
}

type astRankItem struct {
	Channel *astChannel `parser:"@@"`
	TB      *astTB      `parser:"| @@"`
}

type astChannel struct {
	Pos   lexer.Position
	ID    *astNum           `parser:"\"channel\" @@"`
	Attrs []*astChannelAttr `parser:"@@*"`
}

type astChannelAttr struct {
	Pos      lexer.Position
	Peer     *astNum `parser:"(  \"peer\" \"=\" @@"`
	PeerChan *astNum `parser:"\".\" @@"`
	Type     string  `parser:"| @(\"memory\" | \"port\" | \"sm\" | \"proxy\")"`
	Init     *astNum `parser:"| \"init\" \"=\" @@ )"`
}

type astTB struct {
	Pos   lexer.Position
	ID    *astNum  `parser:"\"tb\" @@"`
	Attrs []*astKV `parser:"@@*"`
	Ops   []*astOp `parser:"\"{\" @@* \"}\""`
}

type astOp struct {
	Pos      lexer.Position
	Name     string        `parser:"@Ident"`
	Operands []*astOperand `parser:"( @@ ( \",\" @@ )* )?"`
	Dsts     []*astRef     `parser:"( \"->\" @@ ( \",\" @@ )* )?"`
	Attrs    []*astOpAttr  `parser:"@@*"`
}

// astOperand is a src ref or a channel "@c" (signal/wait/flush). It is
// written so that one token of lookahead after "@" decides: "@c" alone is a
// channel, "@c:" starts a remote ref.
type astOperand struct {
	Pos    lexer.Position
	At     *astNum     `parser:"(  \"@\" @@"`
	Remote *astRefBody `parser:"( \":\" @@ )?"`
	Local  *astRefBody `parser:"| @@ )"`
}

// astRef is a dst ref: optionally remote through a channel.
type astRef struct {
	Pos  lexer.Position
	Chan *astNum     `parser:"( \"@\" @@ \":\" )?"`
	Body *astRefBody `parser:"@@"`
}

type astRefBody struct {
	Pos    lexer.Position
	Buf    string  `parser:"@Ident \"[\""`
	Off    *astNum `parser:"@@"`
	Count  *astNum `parser:"( \"+\" @@ )? \"]\""`
	Packet bool    `parser:"@( \"/\" \"pkt\" )?"`
}

type astOpAttr struct {
	Pos     lexer.Position
	Key     string    `parser:"(  @(\"count\" | \"id\" | \"tbs\") \"=\""`
	Num     *astNum   `parser:"@@"`
	Deps    []*astDep `parser:"| \"deps\" \"=\" @@ ( \",\" @@ )*"`
	Publish bool      `parser:"| @\"publish\" )"`
}

type astDep struct {
	Pos  lexer.Position
	TB   *astNum `parser:"\"(\" @@ \",\""`
	Step *astNum `parser:"@@ \")\""`
}
