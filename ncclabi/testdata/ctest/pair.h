/* pair.h — shared by the C test programs of ncclabi/testdata/ctest that run
 * as one process per rank: rank 0 makes the unique id and prints it as
 * "ID <hex>", the others take that hex as an argument (the GPU scripts'
 * run_pair and capitest start them so). The includer declares g_rank and
 * includes <stdio.h>, <stdlib.h>, nccl.h and ok.h first. */
#ifndef THESEUS_CTEST_PAIR_H_
#define THESEUS_CTEST_PAIR_H_

/* read_id parses the hex that print_id wrote. */
static void read_id(const char* hex, ncclUniqueId* id) {
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
    unsigned x;
    sscanf(hex + 2 * i, "%2x", &x);
    id->internal[i] = (char)x;
  }
}

/* print_id writes "ID <hex>" on a line of its own. */
static void print_id(const ncclUniqueId* id) {
  printf("ID ");
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) printf("%02x", (unsigned char)id->internal[i]);
  printf("\n");
  fflush(stdout);
}

/* pair_id is the id of the program's communicator: made and printed on
 * rank 0, read from hex (NULL: missing, exit 101) on the others. */
static void pair_id(const char* hex, ncclUniqueId* id) {
  if (g_rank == 0) {
    OK(ncclGetUniqueId(id));
    print_id(id);
    return;
  }
  if (!hex) exit(101);
  read_id(hex, id);
}

#endif
