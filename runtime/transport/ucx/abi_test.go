package ucx

import (
	_ "embed"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// abiStructs pairs each declared struct with UCX's and the fields Theseus
// declares (all of them, in UCX 1.13's order).
var abiStructs = []struct {
	ours, theirs string
	fields       []string
}{
	{"th_ucp_params_t", "ucp_params_t", []string{"field_mask", "features", "request_size", "request_init", "request_cleanup", "tag_sender_mask", "mt_workers_shared", "estimated_num_eps", "estimated_num_ppn", "name"}},
	{"th_ucp_context_attr_t", "ucp_context_attr_t", []string{"field_mask", "request_size", "thread_mode", "memory_types", "name"}},
	{"th_ucp_worker_params_t", "ucp_worker_params_t", []string{"field_mask", "thread_mode", "cpu_mask", "events", "user_data", "event_fd", "flags", "name", "am_alignment", "client_id"}},
	{"th_ucp_ep_params_t", "ucp_ep_params_t", []string{"field_mask", "address", "err_mode", "err_handler", "err_handler.cb", "err_handler.arg", "user_data", "flags", "sockaddr", "conn_request", "name", "local_sockaddr"}},
	{"th_ucp_mem_map_params_t", "ucp_mem_map_params_t", []string{"field_mask", "address", "length", "flags", "prot", "memory_type"}},
	{"th_ucp_request_param_t", "ucp_request_param_t", []string{"op_attr_mask", "flags", "request", "cb", "datatype", "user_data", "reply_buffer", "memory_type", "recv_info", "memh"}},
}

// abiTypes are scalar types whose size must agree (enums UCX declares
// packed or not).
var abiTypes = [][2]string{
	{"th_ucs_status_t", "ucs_status_t"}, {"int", "ucs_thread_mode_t"}, {"int", "ucs_memory_type_t"},
	{"int", "ucp_err_handling_mode_t"}, {"int", "ucp_atomic_op_t"}, {"th_ucp_datatype_t", "ucp_datatype_t"},
}

var abiConsts = [][2]string{
	{"TH_UCS_OK", "UCS_OK"}, {"TH_UCS_INPROGRESS", "UCS_INPROGRESS"}, {"TH_UCS_ERR_CANCELED", "UCS_ERR_CANCELED"},
	{"TH_UCS_ERR_TIMED_OUT", "UCS_ERR_TIMED_OUT"}, {"TH_UCS_ERR_LAST", "UCS_ERR_LAST"},
	{"TH_UCP_PARAM_FIELD_FEATURES", "UCP_PARAM_FIELD_FEATURES"}, {"TH_UCP_PARAM_FIELD_MT_WORKERS_SHARED", "UCP_PARAM_FIELD_MT_WORKERS_SHARED"},
	{"TH_UCP_PARAM_FIELD_NAME", "UCP_PARAM_FIELD_NAME"}, {"TH_UCP_FEATURE_RMA", "UCP_FEATURE_RMA"},
	{"TH_UCP_FEATURE_AMO64", "UCP_FEATURE_AMO64"}, {"TH_UCP_FEATURE_AM", "UCP_FEATURE_AM"},
	{"TH_UCP_ATTR_FIELD_MEMORY_TYPES", "UCP_ATTR_FIELD_MEMORY_TYPES"}, {"TH_UCS_MEMORY_TYPE_HOST", "UCS_MEMORY_TYPE_HOST"},
	{"TH_UCS_MEMORY_TYPE_CUDA", "UCS_MEMORY_TYPE_CUDA"}, {"TH_UCP_WORKER_PARAM_FIELD_THREAD_MODE", "UCP_WORKER_PARAM_FIELD_THREAD_MODE"},
	{"TH_UCS_THREAD_MODE_SINGLE", "UCS_THREAD_MODE_SINGLE"}, {"TH_UCS_THREAD_MODE_SERIALIZED", "UCS_THREAD_MODE_SERIALIZED"},
	{"TH_UCP_EP_PARAM_FIELD_REMOTE_ADDRESS", "UCP_EP_PARAM_FIELD_REMOTE_ADDRESS"},
	{"TH_UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE", "UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE"},
	{"TH_UCP_EP_PARAM_FIELD_ERR_HANDLER", "UCP_EP_PARAM_FIELD_ERR_HANDLER"}, {"TH_UCP_EP_PARAM_FIELD_NAME", "UCP_EP_PARAM_FIELD_NAME"},
	{"TH_UCP_ERR_HANDLING_MODE_PEER", "UCP_ERR_HANDLING_MODE_PEER"}, {"TH_UCP_EP_CLOSE_FLAG_FORCE", "UCP_EP_CLOSE_FLAG_FORCE"},
	{"TH_UCP_MEM_MAP_PARAM_FIELD_ADDRESS", "UCP_MEM_MAP_PARAM_FIELD_ADDRESS"},
	{"TH_UCP_MEM_MAP_PARAM_FIELD_LENGTH", "UCP_MEM_MAP_PARAM_FIELD_LENGTH"},
	{"TH_UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE", "UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE"},
	{"TH_UCP_OP_ATTR_FIELD_CALLBACK", "UCP_OP_ATTR_FIELD_CALLBACK"}, {"TH_UCP_OP_ATTR_FIELD_USER_DATA", "UCP_OP_ATTR_FIELD_USER_DATA"},
	{"TH_UCP_OP_ATTR_FIELD_DATATYPE", "UCP_OP_ATTR_FIELD_DATATYPE"}, {"TH_UCP_OP_ATTR_FIELD_FLAGS", "UCP_OP_ATTR_FIELD_FLAGS"},
	{"TH_UCP_OP_ATTR_FIELD_MEMORY_TYPE", "UCP_OP_ATTR_FIELD_MEMORY_TYPE"}, {"TH_UCP_OP_ATTR_FIELD_MEMH", "UCP_OP_ATTR_FIELD_MEMH"},
	{"TH_UCP_ATOMIC_OP_ADD", "UCP_ATOMIC_OP_ADD"}, {"TH_UCP_DT_CONTIG(8)", "ucp_dt_make_contig(8)"},
}

// The header under test, embedded so that a compiled test binary run
// elsewhere (bench/gpu/ucx-transport.sh) checks it too.
//
//go:embed ucp_abi.h
var abiHeader string

var abiInclude = flag.String("ucx.include", "/usr/include", "include directory holding ucp/api/ucp.h for TestABILayout (another UCX release's headers)")

// TestABILayout compiles a C file that includes ucp_abi.h beside UCX's own
// headers (libucx-dev) and asserts, at compile time, that every declared
// struct is a prefix of UCX's with the same field offsets and sizes, every enum its size and every
// constant its value. The entry points' prototypes are checked by
// assigning UCX's functions to pointers of the declared types with the th_
// structs replaced by UCX's (the same text, macro-renamed).
func TestABILayout(t *testing.T) {
	if _, err := os.Stat(filepath.Join(*abiInclude, "ucp/api/ucp.h")); err != nil {
		t.Skipf("UCX's headers are not installed here (%s/ucp/api/ucp.h; Debian package libucx-dev)", *abiInclude)
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc")
	}
	var b strings.Builder
	b.WriteString("#include <stddef.h>\n#include <ucp/api/ucp.h>\n#include \"ucp_abi.h\"\n")
	b.WriteString("#define SAME(a, b) _Static_assert((a) == (b), #a \" != \" #b)\n")
	for _, s := range abiStructs {
		// A prefix: later releases append fields, read only when their
		// mask bit is set.
		fmt.Fprintf(&b, "_Static_assert(sizeof(%s) <= sizeof(%s), \"%s longer than UCX's\");\n", s.ours, s.theirs, s.ours)
		for _, f := range s.fields {
			fmt.Fprintf(&b, "SAME(offsetof(%s, %s), offsetof(%s, %s));\n", s.ours, f, s.theirs, f)
			fmt.Fprintf(&b, "SAME(sizeof(((%s*)0)->%s), sizeof(((%s*)0)->%s));\n", s.ours, f, s.theirs, f)
		}
	}
	for _, p := range abiTypes {
		fmt.Fprintf(&b, "SAME(sizeof(%s), sizeof(%s));\n", p[0], p[1])
	}
	for _, c := range abiConsts {
		fmt.Fprintf(&b, "SAME((long long)(%s), (long long)(%s));\n", c[0], c[1])
	}
	// Prototypes: re-read the typedefs with UCX's types substituted.
	b.WriteString(`
#define th_ucs_status_t ucs_status_t
#define th_ucs_status_ptr_t ucs_status_ptr_t
#define th_ucp_context_h ucp_context_h
#define th_ucp_config_t ucp_config_t
#define th_ucp_worker_h ucp_worker_h
#define th_ucp_ep_h ucp_ep_h
#define th_ucp_address_t ucp_address_t
#define th_ucp_mem_h ucp_mem_h
#define th_ucp_rkey_h ucp_rkey_h
#define th_ucp_params_t ucp_params_t
#define th_ucp_context_attr_t ucp_context_attr_t
#define th_ucp_worker_params_t ucp_worker_params_t
#define th_ucp_ep_params_t ucp_ep_params_t
#define th_ucp_mem_map_params_t ucp_mem_map_params_t
#define th_ucp_request_param_t ucp_request_param_t
`)
	// Only the entry-point typedefs, renamed th2_ so they do not clash.
	for _, line := range strings.SplitAfter(abiHeader, ";\n") {
		if i := strings.Index(line, "typedef"); i >= 0 && strings.Contains(line, "(*th_fn_") {
			l := line[i:]
			l = strings.ReplaceAll(l, "(*th_fn_", "(*th2_fn_")
			l = strings.ReplaceAll(l, "(th_ucp_ep_h, int, const void*", "(th_ucp_ep_h, ucp_atomic_op_t, const void*")
			b.WriteString(l)
		}
	}
	for _, n := range []string{"config_read", "config_modify", "config_release", "get_version", "init_version", "cleanup",
		"context_query", "worker_create", "worker_destroy", "worker_get_address", "worker_release_address",
		"worker_progress", "worker_fence", "worker_flush_nbx", "ep_create", "ep_close_nbx", "ep_flush_nbx",
		"ep_print_info", "mem_map", "mem_unmap", "rkey_pack", "rkey_buffer_release", "ep_rkey_unpack",
		"rkey_destroy", "put_nbx", "atomic_op_nbx", "request_check_status", "request_free"} {
		fmt.Fprintf(&b, "th2_fn_ucp_%s chk_%s = ucp_%s;\n", n, n, n)
	}
	b.WriteString("th2_fn_ucs_status_string chk_status_string = ucs_status_string;\n")
	b.WriteString("int main(void) { return 0; }\n")
	dir := t.TempDir()
	src := filepath.Join(dir, "abi.c")
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ucp_abi.h"), []byte(abiHeader), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gcc, "-std=gnu11", "-Werror=incompatible-pointer-types", "-Wall", "-I", dir, "-I", *abiInclude, "-c", "-o", filepath.Join(dir, "abi.o"), src).CombinedOutput()
	if err != nil {
		t.Fatalf("the declarations in ucp_abi.h differ from UCX's headers:\n%s", out)
	}
}
