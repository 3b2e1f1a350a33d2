/*
 * A simulated libnvidia-ml for running the real pynvml (nvidia-ml-py) without a GPU.
 *
 * Two GPUs without MIG, H100-like. Only the entry points accelkit-cuda reaches through
 * pynvml exist; everything else is absent, as on a driver that lacks it. Built twice by the
 * tests: with -DWITH_V3_PROCESSES (a driver from 510 on) and without it, where pynvml's
 * unversioned nvmlDeviceGetComputeRunningProcesses raises NVMLLibraryMismatchError.
 * NVML_SIM_PID / NVML_SIM_PID_BYTES name one compute process on GPU 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
    SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3,
    INSUFFICIENT_SIZE = 7,
};

typedef struct { int index; } device_t;
typedef device_t *nvmlDevice_t;

typedef struct { unsigned long long total, free, used; } memory_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_t;
typedef struct { unsigned int gpu, memory; } utilization_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} process_t;

static device_t devices[2] = {{0}, {1}};
static int initialized;

static int valid(nvmlDevice_t d) { return initialized && (d == &devices[0] || d == &devices[1]); }

static nvmlReturn_t put(char *buffer, unsigned int length, const char *value) {
    if (strlen(value) + 1 > length) return INSUFFICIENT_SIZE;
    strcpy(buffer, value);
    return SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; initialized = 1; return SUCCESS; }
nvmlReturn_t nvmlInit_v2(void) { initialized = 1; return SUCCESS; }
nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return UNINITIALIZED;
    initialized = 0;
    return SUCCESS;
}
const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NOT_SUPPORTED: return "Not Supported";
    case UNINITIALIZED: return "Uninitialized";
    default: return "Unknown Error";
    }
}
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return initialized ? put(version, length, "550.54.15") : UNINITIALIZED;
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    return initialized ? put(version, length, "12.550.54.15") : UNINITIALIZED;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (!initialized) return UNINITIALIZED;
    *version = 12040;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return UNINITIALIZED;
    *count = 2;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized) return UNINITIALIZED;
    if (index > 1) return INVALID_ARGUMENT;
    *device = &devices[index];
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    return valid(d) ? put(name, length, "NVIDIA H100 80GB HBM3") : INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    char value[64];
    if (!valid(d)) return INVALID_ARGUMENT;
    snprintf(value, sizeof value, "GPU-5d0c%04d-1111-2222-3333-444455556666", d->index);
    return put(uuid, length, value);
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, memory_t *memory) {
    if (!valid(d)) return INVALID_ARGUMENT;
    memory->total = 85520809984ULL;
    memory->used = d->index == 0 ? 4294967296ULL : 0;
    memory->free = memory->total - memory->used;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, pci_t *pci) {
    if (!valid(d)) return INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", 0x3B + d->index);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", 0x3B + d->index);
    pci->bus = 0x3B + d->index;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *node = d->index;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *minor = d->index;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t d, unsigned int *cores) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *cores = 16896;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *major = 9;
    *minor = 0;
    return SUCCESS;
}
/* supported on MIG device handles only */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, void *attributes) {
    (void)attributes;
    return valid(d) ? NOT_SUPPORTED : INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    (void)current; (void)pending;
    return valid(d) ? NOT_SUPPORTED : INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, utilization_t *utilization) {
    if (!valid(d)) return INVALID_ARGUMENT;
    utilization->gpu = 37;
    utilization->memory = 12;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *power = 123456;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *limit) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *limit = 700000;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temperature) {
    if (!valid(d) || sensor != 0) return INVALID_ARGUMENT;
    *temperature = 41 + d->index;
    return SUCCESS;
}

static nvmlReturn_t processes(nvmlDevice_t d, unsigned int *count, process_t *infos) {
    const char *pid = getenv("NVML_SIM_PID");
    const char *bytes = getenv("NVML_SIM_PID_BYTES");
    unsigned int found = (pid != NULL && d == &devices[0]) ? 1 : 0;
    if (!valid(d)) return INVALID_ARGUMENT;
    if (*count < found) {
        *count = found;
        return INSUFFICIENT_SIZE;
    }
    *count = found;
    if (found) {
        infos[0].pid = (unsigned int)strtoul(pid, NULL, 10);
        infos[0].usedGpuMemory = bytes ? strtoull(bytes, NULL, 10) : 0;
        infos[0].gpuInstanceId = 0xFFFFFFFF;
        infos[0].computeInstanceId = 0xFFFFFFFF;
    }
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                     process_t *infos) {
    return processes(d, count, infos);
}
#ifdef WITH_V3_PROCESSES
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     process_t *infos) {
    return processes(d, count, infos);
}
#endif
