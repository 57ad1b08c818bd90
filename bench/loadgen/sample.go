package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sampler reads each process's RSS (peak of samples) and CPU time from /proc
// while a level runs. Its procs and cpus belong to its goroutine until
// finish.
type sampler struct {
	procs map[string]*proc
	stop  chan struct{}
	done  sync.WaitGroup
	start time.Time
	cpus  []cpuSample // every sample's CPU times, in time order
}

// proc is one sampled process; RSS in kB.
type proc struct {
	pid               int
	cpu0              float64
	peak, first, last int64
	warm              bool // first is set: RSS 5 s in (after warm-up)
}

func startSampler(pids map[string]int) *sampler {
	s := &sampler{procs: map[string]*proc{}, stop: make(chan struct{}), start: time.Now()}
	for name, pid := range pids {
		cpu, _ := procStat(pid)
		s.procs[name] = &proc{pid: pid, cpu0: cpu}
	}
	s.done.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *sampler) sample() {
	warm := time.Since(s.start) >= 5*time.Second
	at := cpuSample{at: time.Now(), cpu: make(map[string]float64, len(s.procs))}
	for name, p := range s.procs {
		cpu, kb := procStat(p.pid)
		at.cpu[name] = cpu
		p.peak = max(p.peak, kb)
		if warm && !p.warm {
			p.first, p.warm = kb, true
		}
		p.last = kb
	}
	at.cpu[machineCol], at.cpu[stealCol] = machineStat()
	s.cpus = append(s.cpus, at)
}

// The timeline's columns for the whole machine (in cpuSample only, not in
// a level's per-process figures): CPU time spent busy by anyone, and time
// the hypervisor gave this machine's virtual CPUs to others (steal).
const (
	machineCol = "machine"
	stealCol   = "steal"
)

// machineBusy is the CPU time the whole machine spent busy so far, steal
// included, in seconds.
func machineBusy() float64 {
	busy, steal := machineStat()
	return busy + steal
}

// machineStat reads the busy (user, nice, system, irq, softirq) and steal
// times of all CPUs, in seconds, from /proc/stat; zeros if it cannot.
func machineStat() (busy, steal float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for _, i := range []int{1, 2, 3, 6, 7} {
		v, _ := strconv.ParseFloat(f[i], 64)
		busy += v
	}
	steal, _ = strconv.ParseFloat(f[8], 64)
	return busy / 100, steal / 100
}

// finish stops the sampling and returns, per process, peak RSS in MB, CPU use
// in percent of one core, and (if the level lasted 5 s) RSS in MB 5 s in and
// at the end.
func (s *sampler) finish() (rss, cpu map[string]float64, growth map[string][2]float64) {
	close(s.stop)
	s.done.Wait()
	s.sample() // the last instant, for cpuOver
	wall := time.Since(s.start).Seconds()
	rss, cpu, growth = map[string]float64{}, map[string]float64{}, map[string][2]float64{}
	for name, p := range s.procs {
		cpuSeconds, _ := procStat(p.pid)
		rss[name] = float64(p.peak) / 1024
		cpu[name] = 100 * (cpuSeconds - p.cpu0) / wall
		if p.warm {
			growth[name] = [2]float64{float64(p.first) / 1024, float64(p.last) / 1024}
		}
	}
	return rss, cpu, growth
}

// procStat reads pid's CPU time, utime+stime in seconds (clock ticks of
// 1/100 s on Linux), and its resident set in kB (the VmRSS of
// /proc/<pid>/status) from /proc/<pid>/stat; zeros if it cannot.
func procStat(pid int) (cpuSeconds float64, rssKB int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	s := string(b) // pid (comm) state ppid ...: the fields after comm, which may hold spaces
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 22 {
		return 0, 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	return (u + k) / 100, pages * int64(os.Getpagesize()) / 1024
}
