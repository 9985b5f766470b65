// The halo kernel's file as host C++ (prelude.h force-included; bsh_smem
// replaced by the emulated CTA's shared memory) and the one call the
// emulator's launch needs: a kernel pointer applied to its bsh_args.
#include BSH_SOURCE
void emu_run_cta(const void *fn, void **args) { ((void (*)(bsh_args))fn)(*(const bsh_args *)args[0]); }
