package program

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryShare is the part of a container's memory limit the Go runtime is
// told to stay within: the rest is for what it does not count (stacks
// beyond the heap's accounting, the binary, the kernel's buffers).
const memoryShare = 0.9

// cgroupLimitFiles hold a container's memory limit (cgroup v2, then v1).
var cgroupLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// setMemoryLimit gives the runtime a soft memory limit of memoryShare of
// the container's, unless GOMEMLIMIT is set: the garbage collector then
// works harder near the limit instead of letting the kernel kill the
// process. It returns the limit set (0: none).
func setMemoryLimit() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1)
	}
	if n := cgroupLimit(); n > 0 {
		limit := int64(float64(n) * memoryShare)
		debug.SetMemoryLimit(limit)
		return limit
	}
	return 0
}

// ContainerMemory is the memory this process may use: the container's
// limit, else GOMEMLIMIT, else 0 (unknown). Limits that scale with memory
// default from it.
func ContainerMemory() int64 {
	if n := cgroupLimit(); n > 0 {
		return n
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		if n := debug.SetMemoryLimit(-1); n < 1<<62 {
			return n
		}
	}
	return 0
}

// cgroupLimit is the container's memory limit in bytes, from the first of
// cgroupLimitFiles that holds one; 0 for none ("max", or v1's huge
// "unlimited" value).
func cgroupLimit() int64 {
	for _, f := range cgroupLimitFiles {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil && n > 0 && n < 1<<60 {
			return n
		}
	}
	return 0
}
