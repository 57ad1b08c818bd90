package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sampler reads each process's RSS (peak of samples) and CPU time from /proc
// while a level runs. Its maps belong to its goroutine until finish.
type sampler struct {
	pids  map[string]int
	stop  chan struct{}
	done  sync.WaitGroup
	peak  map[string]int64 // kB
	first map[string]int64 // kB, 5 s in (after warm-up)
	last  map[string]int64 // kB
	cpu0  map[string]float64
	start time.Time
}

func startSampler(pids map[string]int) *sampler {
	s := &sampler{pids: pids, stop: make(chan struct{}), peak: map[string]int64{}, first: map[string]int64{}, last: map[string]int64{}, cpu0: map[string]float64{}, start: time.Now()}
	for name, pid := range pids {
		s.cpu0[name] = cpuSeconds(pid)
	}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
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
	}()
	return s
}

func (s *sampler) sample() {
	warm := time.Since(s.start) >= 5*time.Second
	for name, pid := range s.pids {
		kb := rssKB(pid)
		if kb > s.peak[name] {
			s.peak[name] = kb
		}
		if _, ok := s.first[name]; warm && !ok {
			s.first[name] = kb
		}
		s.last[name] = kb
	}
}

// finish stops the sampling and returns, per process, peak RSS in MB, CPU use
// in percent of one core, and (if the level lasted 5 s) RSS in MB 5 s in and
// at the end.
func (s *sampler) finish() (rss, cpu map[string]float64, growth map[string][2]float64) {
	close(s.stop)
	s.done.Wait()
	wall := time.Since(s.start).Seconds()
	rss, cpu, growth = map[string]float64{}, map[string]float64{}, map[string][2]float64{}
	for name, pid := range s.pids {
		rss[name] = float64(s.peak[name]) / 1024
		cpu[name] = 100 * (cpuSeconds(pid) - s.cpu0[name]) / wall
		if f, ok := s.first[name]; ok {
			growth[name] = [2]float64{float64(f) / 1024, float64(s.last[name]) / 1024}
		}
	}
	return rss, cpu, growth
}

func rssKB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// cpuSeconds is utime+stime of pid (clock ticks of 1/100 s on Linux).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100
}
