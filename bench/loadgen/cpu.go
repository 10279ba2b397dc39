package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of utime and stime in /proc/PID/stat
// (100 on every Linux this runs on).
const clockTick = 10 * time.Millisecond

// cpuSample is CPU time (user + system) used so far by this process (the load
// generator) and by the servers whose PIDs it was given.
type cpuSample struct{ self, servers time.Duration }

func sampleCPU(pids []int) cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, pid := range pids {
		s.servers += procCPU(pid)
	}
	return s
}

// procCPU is pid's utime + stime from /proc/PID/stat (0 when it cannot be read).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; the fields after its ')' are
	// state (3), ..., utime (14), stime (15).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * clockTick
}

// perOp is the CPU microseconds per operation between two samples.
func perOp(from, to time.Duration, ops int64) float64 {
	if ops <= 0 {
		return 0
	}
	return float64(to-from) / float64(time.Microsecond) / float64(ops)
}
