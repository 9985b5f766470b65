# sparsecnn build: everything goes to build/, tools to build/bin/, tests to
# build/tests/. With nvcc and cuDNN present the GPU backend is built for every
# GPU from compute capability 8.0 (SASS for CUDA_ARCH, PTX of the newest; e.g.
# `make CUDA_ARCH=90` for an H100 only); without them the same tools are
# built CPU-only.
#
# File conventions (no Makefile edits needed for new files):
#   <dir>/<tool>_main.c        -> build/bin/<tool>
#   tests/test_*.c             -> build/tests/test_*      (every build)
#   tests/gpu_test_*.c         -> build/tests/gpu_test_*  (GPU builds only)
#   *.cu, *_gpu.c              GPU builds only
#   *_none.c                   CPU-only builds only (stand-ins for GPU code)
#   *_mpi.c / *_nompi.c        builds with / without MPI (mpicc found; MPI=0 turns it off)

# SANITIZE=1: AddressSanitizer and UBSan in every object and link (build in
# build-san/ so the plain objects stay); CFLAGS given on the command line are
# added to the Makefile's own flags, never replace them.
SANITIZE ?= 0
BUILD   := $(if $(filter 1,$(SANITIZE)),build-san,build)
CC      ?= gcc
CUDA    ?= /usr/local/cuda
NVCC    := $(shell command -v nvcc 2>/dev/null || ls $(CUDA)/bin/nvcc 2>/dev/null)
CUDNN_H := $(firstword $(wildcard $(CUDA)/include/cudnn.h /usr/local/include/cudnn.h /usr/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h))
GPU     ?= $(if $(and $(NVCC),$(CUDNN_H)),1,0)

HDF5_INC := -I/usr/include/hdf5/serial
HDF5_LIB := -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5
BLAS_INC := -I/usr/include/x86_64-linux-gnu/openblas-pthread
# OpenBLAS is linked statically so binaries run where it is not installed.
BLAS_LIB := /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a -lpthread
# GSL (quantize: histograms, RNG) is linked statically too: the GPU machine has none.
GSL_LIB  := $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/libgsl.a) -lgsl)
# MPI (prune over several ranks) is optional: used when mpicc exists.
MPICC    := $(shell command -v mpicc 2>/dev/null)
MPI      ?= $(if $(MPICC),1,0)

CFLAGS  ?= -O2 -g
override CFLAGS += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fopenmp -I. $(HDF5_INC) $(BLAS_INC) -MMD -MP
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ifeq ($(SANITIZE),1)
  override CFLAGS  += $(SAN_FLAGS)
  override LDFLAGS += $(SAN_FLAGS)
endif
LDLIBS  := -Wl,--as-needed $(HDF5_LIB) -lz $(GSL_LIB) $(BLAS_LIB) -lm -fopenmp

DIRS    := runtime kernels datasets train prune quantize export
ALL_C   := $(foreach d,$(DIRS),$(wildcard $(d)/*.c))
MAINS   := $(filter %_main.c,$(ALL_C))
LIB_C   := $(filter-out %_main.c,$(ALL_C))

ifeq ($(MPI),1)
  override CFLAGS += -DSC_HAVE_MPI $(shell $(MPICC) --showme:compile)
  LDLIBS  += $(shell $(MPICC) --showme:link)
  LIB_C   := $(filter-out %_nompi.c,$(LIB_C))
else
  LIB_C   := $(filter-out %_mpi.c,$(LIB_C))
endif

# GPU code: SASS for each compute capability in CUDA_ARCH (8.0's runs on every
# 8.x GPU: A100, RTX 30 / A10, RTX 40 / L4; 9.0: H100 / H200) and PTX of the
# last one for newer GPUs. CUDA_ARCH="80 86 89 90" adds SASS scheduled for 8.6
# and 8.9 (two more back-end passes per file; not measured to be faster). The
# SASS of one major version is generated from the PTX of its lowest listed
# arch, so the front end runs once per major version, not once per arch;
# nvcc runs the steps of one file in parallel with NVCC_THREADS threads (0:
# one per core).
CUDA_ARCH    ?= 80 90
NVCC_THREADS ?= 0
# LINEINFO=1: source-line tables in the GPU code, for Nsight Compute's source view
# (`ncu --import-source yes`); the code itself is unchanged.
LINEINFO     ?= 0
nv_major   = $(firstword $(foreach m,5 6 7 8 9,$(if $(filter $(m)%,$(1)),$(m))))
nv_virtual = $(if $(call nv_major,$(1)),$(firstword $(filter $(call nv_major,$(1))%,$(CUDA_ARCH))),$(1))
NVARCH    := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(call nv_virtual,$(a)),code=sm_$(a)) \
             -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))
NVTHREADS := $(if $(word 2,$(CUDA_ARCH)),--threads $(NVCC_THREADS))

ifeq ($(GPU),1)
  CU_SRC  := $(foreach d,$(DIRS),$(wildcard $(d)/*.cu))
  LIB_C   := $(filter-out %_none.c,$(LIB_C))
  override CFLAGS += -DSC_HAVE_CUDA -I$(CUDA)/include
  NVFLAGS := -O3 -std=c++17 -I. -DSC_HAVE_CUDA $(NVARCH) $(NVTHREADS) $(if $(filter 1,$(LINEINFO)),-lineinfo) \
             -Xcompiler -Wall -MMD -MP
  LDLIBS  += -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64 -lcudnn -lcublasLt -lcublas -lcusparse -lcudart -lstdc++
  TEST_SRC := $(wildcard tests/test_*.c tests/gpu_test_*.c)
else
  CU_SRC  :=
  LIB_C   := $(filter-out %_gpu.c,$(LIB_C))
  TEST_SRC := $(wildcard tests/test_*.c)
endif

LIB_OBJ := $(LIB_C:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
LIB     := $(BUILD)/libsparsecnn.a
TOOLS   := $(foreach m,$(MAINS),$(BUILD)/bin/$(notdir $(m:_main.c=)))
TESTS   := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TESTBIN := $(BUILD)/testbin/prune
HELPERS := $(patsubst tests/helper_%.c,$(BUILD)/helpers/%,$(wildcard tests/helper_*.c))

.PHONY: all test clean info setup demo build deps fuzz fuzz-build
all: $(TOOLS) $(TESTS) $(TESTBIN) $(HELPERS)
	@echo "built $(words $(TOOLS)) tools and $(words $(TESTS)) tests (GPU=$(GPU))"

info:
	@echo "GPU=$(GPU) NVCC=$(NVCC) CUDNN_H=$(CUDNN_H) MPI=$(MPI)"

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# $(call stamp,TEXT,FILE): writes the line TEXT into FILE only when it differs, so
# that what depends on FILE is rebuilt only on a change (never by a dry run, make -n).
DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))
stamp    = $(if $(DRY_RUN),,$(shell mkdir -p $(dir $(2)) && echo '$(1)' | cmp -s - $(2) || echo '$(1)' >$(2)))

# The build's identity (git describe, "unknown" outside a checkout) in a header:
# prune keys the latency tables it caches on it, so a table measured with other
# kernels is not reused.
BUILD_ID   := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
BUILD_ID_H := $(BUILD)/build_id.h
$(call stamp,#define SC_BUILD_ID "$(BUILD_ID)",$(BUILD_ID_H))
override CFLAGS += -I$(BUILD)

# The nvcc flags of the last GPU build: a change (CUDA_ARCH, LINEINFO) rebuilds every .cu object.
NVSTAMP := $(BUILD)/nvflags
ifeq ($(GPU),1)
  $(call stamp,$(NVFLAGS),$(NVSTAMP))
endif

$(BUILD)/obj/%.cu.o: %.cu $(NVSTAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Each tool's main object links against the library.
define TOOL_RULE
$(BUILD)/bin/$(notdir $(1:_main.c=)): $(BUILD)/obj/$(1:.c=.o) $(LIB)
	@mkdir -p $(BUILD)/bin
	$(CC) $(LDFLAGS) -o $$@ $$^ $(LDLIBS)
endef
$(foreach m,$(MAINS),$(eval $(call TOOL_RULE,$(m))))

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The tuner test links a test-only build of the variant lists that plants
# wrong and unpreparable variants (its object comes before the library).
$(BUILD)/obj/kernels/spconv_plan_plant.cu.o: kernels/spconv_plan.cu $(NVSTAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -DSC_TEST_PLANT_WRONG -c $< -o $@

# The cuDNN plan tuner's test links a build whose first plan writes wrong values.
$(BUILD)/obj/kernels/fconv_gpu_plant.o: kernels/fconv_gpu.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSC_TEST_PLANT_WRONG -c $< -o $@

$(BUILD)/tests/gpu_test_fconv: $(BUILD)/obj/tests/gpu_test_fconv.o $(BUILD)/obj/kernels/fconv_gpu_plant.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/gpu_test_tune: $(BUILD)/obj/tests/gpu_test_tune.o \
                              $(BUILD)/obj/kernels/spconv_plan_plant.cu.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# A prune binary with the test hooks (SC_TEST_HOOKS: tests/cli_prune_mpi.sh
# kills a rank through it); the shipped tools have none.
$(BUILD)/obj/prune/search_hooks.o: prune/search.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSC_TEST_HOOKS -c $< -o $@

$(BUILD)/testbin/prune: $(BUILD)/obj/prune/prune_main.o $(BUILD)/obj/prune/search_hooks.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Fails on an include against the layer order kernels <- runtime <- the rest
# (also run by `make test`, as tests/deps.sh).
deps:
	@bash tests/deps.sh

# Programs the CLI tests call (tests/helper_NAME.c -> build/helpers/NAME).
$(BUILD)/helpers/%: $(BUILD)/obj/tests/helper_%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Debian/Ubuntu packages the build and the tests need; installed when root.
PKGS := build-essential libhdf5-dev hdf5-tools libopenblas-dev libgsl-dev gnuplot-nox \
        python3-h5py python3-scipy python3-numpy openmpi-bin libopenmpi-dev

# Installs what is missing (as root), or says what to install.
setup:
	@missing=""; for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" -eq 0 ]; then echo "setup: installing$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	  else echo "setup: missing packages:$$missing; run: sudo apt-get install$$missing" >&2; exit 1; fi; \
	fi

# Set-up first, then the build (a fresh make reads the installed headers).
build: setup
	@$(MAKE) --no-print-directory -j$$(nproc) all

# Every test; the last line is "N passed, N failed, N skipped". With
# SANITIZE=1 a sanitizer report fails the program that printed it.
test: build
	@BUILD=$(BUILD) SANITIZE=$(SANITIZE) bash tests/run.sh

# --- fuzzing (libFuzzer, clang) ----------------------------------------------
# make fuzz FUZZ_SECONDS=N runs each harness of tests/fuzz/ for N seconds on a
# copy of its seed corpus (tests/fuzz/corpus/<name>/) under ASan and UBSan;
# crashes land in build-fuzz/crashes/<name>/. make fuzz-build only builds.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD   := build-fuzz
FUZZ_NAMES   := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -O1 -g -std=gnu11 -fopenmp -I. $(HDF5_INC) $(BLAS_INC) $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_LIB_C   := $(filter-out %_main.c %_gpu.c %_mpi.c,$(foreach d,$(DIRS),$(wildcard $(d)/*.c)))
FUZZ_LDLIBS  := -Wl,--as-needed $(HDF5_LIB) -lz $(GSL_LIB) $(BLAS_LIB) -lm
FUZZ_OBJ     := $(FUZZ_LIB_C:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_BINS    := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/%)

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_BUILD)/libfuzz.a: $(FUZZ_OBJ)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/libfuzz.a
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -fopenmp -o $@ $^ $(FUZZ_LDLIBS)

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	@for n in $(FUZZ_NAMES); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$n $(FUZZ_BUILD)/crashes/$$n; \
	  cp -n tests/fuzz/corpus/$$n/* $(FUZZ_BUILD)/corpus/$$n/ 2>/dev/null; \
	  echo "fuzz: $$n for $(FUZZ_SECONDS) s"; \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/fuzz/lsan.supp \
	  $(FUZZ_BUILD)/$$n -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -max_len=65536 -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/crashes/$$n/ \
	    $(FUZZ_BUILD)/corpus/$$n >$(FUZZ_BUILD)/$$n.log 2>&1; rc=$$?; \
	  grep -E '(DONE|==[0-9]+==ERROR|SUMMARY|runtime error|stat::number_of_executed_units)' $(FUZZ_BUILD)/$$n.log; \
	  [ $$rc -eq 0 ] || { echo "fuzz: $$n failed (exit $$rc), see $(FUZZ_BUILD)/$$n.log"; exit 1; }; \
	done

# The main job: the whole pipeline on the default data (data/cifar-100-binary
# when present, else the synthetic set): train, prune the trained model,
# quantize it (16-centroid codebooks), export CSR, deploy (ends with deploy's
# report). On a GPU: resnet18 for 30 epochs and the evolutionary search to
# 90%; on a CPU-only machine a quick LeNet version. Override the options with
# DEMO_TRAIN / DEMO_PRUNE / DEMO_QUANT / DEMO_DEPLOY.
DEMO_GPU_TRAIN := --model resnet18 --epochs 30
DEMO_GPU_PRUNE := --from latest --target-sparsity 0.9 --lr 0.2 --sched onecycle --warmup 0.1 --batches 10 --iterations 24
DEMO_CPU_TRAIN := --model lenet --epochs 5 --batch 128
DEMO_CPU_PRUNE := --from latest --target-sparsity 0.9 --batch 128 --population 4 --iterations 6 --batches 10
DEMO_QUANT     := --centroids 16
DEMO_GPU_DEPLOY := --reference 1000
DEMO_CPU_DEPLOY := --test-images 2000
demo: build
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [ "$(GPU)" = 1 ]; then \
	  t="$${DEMO_TRAIN:-$(DEMO_GPU_TRAIN)}"; p="$${DEMO_PRUNE:-$(DEMO_GPU_PRUNE)}"; d="$${DEMO_DEPLOY:-$(DEMO_GPU_DEPLOY)}"; \
	else t="$${DEMO_TRAIN:-$(DEMO_CPU_TRAIN)}"; p="$${DEMO_PRUNE:-$(DEMO_CPU_PRUNE)}"; d="$${DEMO_DEPLOY:-$(DEMO_CPU_DEPLOY)}"; fi; \
	q="$${DEMO_QUANT:-$(DEMO_QUANT)}"; \
	echo "demo: $(BUILD)/bin/train $$t"; $(BUILD)/bin/train $$t || exit 1; \
	echo "demo: $(BUILD)/bin/prune $$p"; $(BUILD)/bin/prune $$p || exit 1; \
	echo "demo: $(BUILD)/bin/quantize $$q"; $(BUILD)/bin/quantize $$q || exit 1; \
	echo "demo: $(BUILD)/bin/export"; $(BUILD)/bin/export || exit 1; \
	echo "demo: $(BUILD)/bin/deploy $$d"; $(BUILD)/bin/deploy $$d

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
