// A block-sparse kernel's file as host C++ (prelude.h force-included; the
// halo kernel's bsh_smem replaced by the emulated CTA's shared memory, the
// direct kernel's static shared arrays made static) and the one call the
// emulator's launch needs: a kernel pointer applied to its argument struct
// (EMU_ARGS, by the function EMU_RUNNER; tests/halo_emu.sh sets both).
#include EMU_SOURCE
void EMU_RUNNER(const void *fn, void **args) { ((void (*)(EMU_ARGS))fn)(*(const EMU_ARGS *)args[0]); }
