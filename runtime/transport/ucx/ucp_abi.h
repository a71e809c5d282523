// The subset of the UCP API (UCX's libucp) that Theseus calls, declared here
// so that nothing of UCX is needed at build time: libucp is opened with
// dlopen at run time (ucx.go).
//
// Every name carries a th_ prefix so that a test can include this file next
// to the real <ucp/api/ucp.h> and compare each size, field offset and
// constant (TestABILayout). The declarations follow UCX 1.13's headers; the
// parameter structs are extended only at their end in later releases and
// UCX reads a field only when its bit is set in field_mask / op_attr_mask,
// so the same declarations hold for 1.16 (compared by hand against the
// v1.13.1 and v1.16.0 headers; docs/transport.md).
#ifndef THESEUS_UCP_ABI_H
#define THESEUS_UCP_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

typedef int8_t th_ucs_status_t;  // ucs_status_t is an int8_t-ranged enum
typedef void* th_ucs_status_ptr_t;
typedef struct th_ucp_context* th_ucp_context_h;
typedef struct th_ucp_config th_ucp_config_t;
typedef struct th_ucp_worker* th_ucp_worker_h;
typedef struct th_ucp_ep* th_ucp_ep_h;
typedef struct th_ucp_address th_ucp_address_t;
typedef struct th_ucp_mem* th_ucp_mem_h;
typedef struct th_ucp_rkey_handle* th_ucp_rkey_h;
typedef uint64_t th_ucp_datatype_t;

// ucs_status_t values used by name.
enum {
  TH_UCS_OK = 0,
  TH_UCS_INPROGRESS = 1,
  TH_UCS_ERR_CANCELED = -16,
  TH_UCS_ERR_TIMED_OUT = -20,
  TH_UCS_ERR_LAST = -100,
};
#define TH_UCS_PTR_IS_ERR(p) (((uintptr_t)(p)) >= ((uintptr_t)TH_UCS_ERR_LAST))
#define TH_UCS_PTR_IS_PTR(p) (((uintptr_t)(p) - 1) < ((uintptr_t)TH_UCS_ERR_LAST - 1))
#define TH_UCS_PTR_RAW_STATUS(p) ((th_ucs_status_t)(intptr_t)(p))

// ucp_params_t (UCP_PARAM_FIELD_*, UCP_FEATURE_*).
typedef struct {
  uint64_t field_mask;
  uint64_t features;
  size_t request_size;
  void (*request_init)(void*);
  void (*request_cleanup)(void*);
  uint64_t tag_sender_mask;
  int mt_workers_shared;
  size_t estimated_num_eps;
  size_t estimated_num_ppn;
  const char* name;
} th_ucp_params_t;
enum {
  TH_UCP_PARAM_FIELD_FEATURES = 1 << 0,
  TH_UCP_PARAM_FIELD_MT_WORKERS_SHARED = 1 << 5,
  TH_UCP_PARAM_FIELD_NAME = 1 << 8,
  TH_UCP_FEATURE_RMA = 1 << 1,
  TH_UCP_FEATURE_AMO64 = 1 << 3,
  TH_UCP_FEATURE_AM = 1 << 6,
};

// ucp_context_attr_t (UCP_ATTR_FIELD_*).
typedef struct {
  uint64_t field_mask;
  size_t request_size;
  int thread_mode;  // ucs_thread_mode_t
  uint64_t memory_types;
  char name[32];  // UCP_ENTITY_NAME_MAX
} th_ucp_context_attr_t;
enum {
  TH_UCP_ATTR_FIELD_MEMORY_TYPES = 1 << 2,
  TH_UCS_MEMORY_TYPE_HOST = 0,
  TH_UCS_MEMORY_TYPE_CUDA = 1,
};

// ucp_worker_params_t (UCP_WORKER_PARAM_FIELD_*).
typedef struct {
  uint64_t field_mask;
  int thread_mode;  // ucs_thread_mode_t
  struct { unsigned long bits[1024 / (8 * sizeof(unsigned long))]; } cpu_mask;  // ucs_cpu_set_t
  unsigned events;
  void* user_data;
  int event_fd;
  uint64_t flags;
  const char* name;
  size_t am_alignment;
  uint64_t client_id;
} th_ucp_worker_params_t;
enum {
  TH_UCP_WORKER_PARAM_FIELD_THREAD_MODE = 1 << 0,
  TH_UCS_THREAD_MODE_SINGLE = 0,
  TH_UCS_THREAD_MODE_SERIALIZED = 1,
};

// ucp_ep_params_t (UCP_EP_PARAM_FIELD_*, ucp_err_handling_mode_t).
typedef void (*th_ucp_err_handler_cb_t)(void* arg, th_ucp_ep_h ep, th_ucs_status_t status);
typedef struct {
  th_ucp_err_handler_cb_t cb;
  void* arg;
} th_ucp_err_handler_t;
typedef struct {
  const struct sockaddr* addr;
  socklen_t addrlen;
} th_ucs_sock_addr_t;
typedef struct {
  uint64_t field_mask;
  const th_ucp_address_t* address;
  int err_mode;  // ucp_err_handling_mode_t
  th_ucp_err_handler_t err_handler;
  void* user_data;
  unsigned flags;
  th_ucs_sock_addr_t sockaddr;
  void* conn_request;
  const char* name;
  th_ucs_sock_addr_t local_sockaddr;
} th_ucp_ep_params_t;
enum {
  TH_UCP_EP_PARAM_FIELD_REMOTE_ADDRESS = 1 << 0,
  TH_UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE = 1 << 1,
  TH_UCP_EP_PARAM_FIELD_ERR_HANDLER = 1 << 2,
  TH_UCP_EP_PARAM_FIELD_NAME = 1 << 7,
  TH_UCP_ERR_HANDLING_MODE_PEER = 1,
  TH_UCP_EP_CLOSE_FLAG_FORCE = 1 << 0,
};

// ucp_mem_map_params_t (UCP_MEM_MAP_PARAM_FIELD_*).
typedef struct {
  uint64_t field_mask;
  void* address;
  size_t length;
  unsigned flags;
  unsigned prot;
  int memory_type;  // ucs_memory_type_t
} th_ucp_mem_map_params_t;
enum {
  TH_UCP_MEM_MAP_PARAM_FIELD_ADDRESS = 1 << 0,
  TH_UCP_MEM_MAP_PARAM_FIELD_LENGTH = 1 << 1,
  TH_UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE = 1 << 4,
};

// ucp_request_param_t (UCP_OP_ATTR_*).
typedef void (*th_ucp_send_nbx_callback_t)(void* request, th_ucs_status_t status, void* user_data);
typedef struct {
  uint32_t op_attr_mask;
  uint32_t flags;
  void* request;
  union {
    th_ucp_send_nbx_callback_t send;
    void* other;
  } cb;
  th_ucp_datatype_t datatype;
  void* user_data;
  void* reply_buffer;
  int memory_type;  // ucs_memory_type_t
  union {
    size_t* length;
    void* tag_info;
  } recv_info;
  th_ucp_mem_h memh;
} th_ucp_request_param_t;
enum {
  TH_UCP_OP_ATTR_FIELD_CALLBACK = 1 << 1,
  TH_UCP_OP_ATTR_FIELD_USER_DATA = 1 << 2,
  TH_UCP_OP_ATTR_FIELD_DATATYPE = 1 << 3,
  TH_UCP_OP_ATTR_FIELD_FLAGS = 1 << 4,
  TH_UCP_OP_ATTR_FIELD_MEMORY_TYPE = 1 << 6,
  TH_UCP_OP_ATTR_FIELD_MEMH = 1 << 8,
  TH_UCP_ATOMIC_OP_ADD = 0,  // ucp_atomic_op_t
  TH_UCP_DATATYPE_SHIFT = 3,
};
#define TH_UCP_DT_CONTIG(elem) (((th_ucp_datatype_t)(elem) << TH_UCP_DATATYPE_SHIFT) | 0)

// Entry points, in the order of th_ucp_names (ucx.go).
typedef th_ucs_status_t (*th_fn_ucp_config_read)(const char*, const char*, th_ucp_config_t**);
typedef th_ucs_status_t (*th_fn_ucp_config_modify)(th_ucp_config_t*, const char*, const char*);
typedef void (*th_fn_ucp_config_release)(th_ucp_config_t*);
typedef void (*th_fn_ucp_get_version)(unsigned*, unsigned*, unsigned*);
typedef th_ucs_status_t (*th_fn_ucp_init_version)(unsigned, unsigned, const th_ucp_params_t*,
                                                  const th_ucp_config_t*, th_ucp_context_h*);
typedef void (*th_fn_ucp_cleanup)(th_ucp_context_h);
typedef th_ucs_status_t (*th_fn_ucp_context_query)(th_ucp_context_h, th_ucp_context_attr_t*);
typedef th_ucs_status_t (*th_fn_ucp_worker_create)(th_ucp_context_h, const th_ucp_worker_params_t*,
                                                   th_ucp_worker_h*);
typedef void (*th_fn_ucp_worker_destroy)(th_ucp_worker_h);
typedef th_ucs_status_t (*th_fn_ucp_worker_get_address)(th_ucp_worker_h, th_ucp_address_t**, size_t*);
typedef void (*th_fn_ucp_worker_release_address)(th_ucp_worker_h, th_ucp_address_t*);
typedef unsigned (*th_fn_ucp_worker_progress)(th_ucp_worker_h);
typedef th_ucs_status_t (*th_fn_ucp_worker_fence)(th_ucp_worker_h);
typedef th_ucs_status_ptr_t (*th_fn_ucp_worker_flush_nbx)(th_ucp_worker_h, const th_ucp_request_param_t*);
typedef th_ucs_status_t (*th_fn_ucp_ep_create)(th_ucp_worker_h, const th_ucp_ep_params_t*, th_ucp_ep_h*);
typedef th_ucs_status_ptr_t (*th_fn_ucp_ep_close_nbx)(th_ucp_ep_h, const th_ucp_request_param_t*);
typedef th_ucs_status_ptr_t (*th_fn_ucp_ep_flush_nbx)(th_ucp_ep_h, const th_ucp_request_param_t*);
typedef void (*th_fn_ucp_ep_print_info)(th_ucp_ep_h, FILE*);
typedef th_ucs_status_t (*th_fn_ucp_mem_map)(th_ucp_context_h, const th_ucp_mem_map_params_t*, th_ucp_mem_h*);
typedef th_ucs_status_t (*th_fn_ucp_mem_unmap)(th_ucp_context_h, th_ucp_mem_h);
typedef th_ucs_status_t (*th_fn_ucp_rkey_pack)(th_ucp_context_h, th_ucp_mem_h, void**, size_t*);
typedef void (*th_fn_ucp_rkey_buffer_release)(void*);
typedef th_ucs_status_t (*th_fn_ucp_ep_rkey_unpack)(th_ucp_ep_h, const void*, th_ucp_rkey_h*);
typedef void (*th_fn_ucp_rkey_destroy)(th_ucp_rkey_h);
typedef th_ucs_status_ptr_t (*th_fn_ucp_put_nbx)(th_ucp_ep_h, const void*, size_t, uint64_t, th_ucp_rkey_h,
                                                 const th_ucp_request_param_t*);
typedef th_ucs_status_ptr_t (*th_fn_ucp_atomic_op_nbx)(th_ucp_ep_h, int, const void*, size_t, uint64_t,
                                                       th_ucp_rkey_h, const th_ucp_request_param_t*);
typedef th_ucs_status_t (*th_fn_ucp_request_check_status)(void*);
typedef void (*th_fn_ucp_request_free)(void*);
typedef const char* (*th_fn_ucs_status_string)(th_ucs_status_t);

#endif
