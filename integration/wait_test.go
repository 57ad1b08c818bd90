package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/integration/testenv"
)

// progress is what the stack's programs have done so far: the bytes they
// logged and the CPU time they used. A program on a busy machine gets CPU
// slowly, but it gets some.
func (s *stack) progress() string {
	var cpu float64
	for _, cmd := range s.procs {
		if cmd.ProcessState == nil {
			cpu += cpuSecs(cmd.Process.Pid)
		}
	}
	return fmt.Sprintf("logs %d bytes, cpu %.2f s", s.logBytes(), cpu)
}

// childrenProgress is the CPU time this test process's children (the
// programs of every stack it started) used so far: the progress of a wait
// that knows no stack.
func childrenProgress() string {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var cpu float64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procField(pid, 1); ppid == strconv.Itoa(self) {
			cpu += cpuSecs(pid)
		}
	}
	return fmt.Sprintf("programs' cpu %.2f s", cpu)
}

// dead names the stack's programs that exited while no test stopped them
// (a test that stops one waits for it: its ProcessState is set).
func (s *stack) dead() string {
	var out []string
	for name, cmd := range s.procs {
		if cmd.ProcessState != nil {
			continue
		}
		if st, err := procState(cmd.Process.Pid); err != nil || st == "Z" {
			b, _ := os.ReadFile(filepath.Join(s.logDir, name+".log"))
			out = append(out, fmt.Sprintf("%s exited:\n%s", name, tail(b, 2000)))
		}
	}
	return strings.Join(out, "\n")
}

// waitOK waits until url answers 200, as long as the stack progresses;
// what it answered last is part of the progress (a readiness check's
// error changes as the program gets further).
func (s *stack) waitOK(t testing.TB, what, url string) {
	t.Helper()
	answer := "no answer yet"
	testenv.WaitFor(t, what, testenv.WaitStall, func() string { return s.progress() + ", last answer: " + answer }, s.dead, func() bool {
		resp, err := s.http.Get(url)
		if err != nil {
			answer = err.Error()
			return false
		}
		raw := make([]byte, 512)
		n, _ := resp.Body.Read(raw)
		resp.Body.Close()
		answer = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(raw[:n])))
		return resp.StatusCode == http.StatusOK
	})
}

// procState is the state letter of process pid ("R", "S", "Z"...).
func procState(pid int) (string, error) { return procField(pid, 0) }

// procField is field i of /proc/pid/stat after the command's name (0: the
// state, 1: the parent's pid, 11 and 12: user and system CPU ticks).
func procField(pid, i int) (string, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(f) <= i {
		return "", fmt.Errorf("process %d: no field %d", pid, i)
	}
	return f[i], nil
}

// cpuSecs is the CPU time process pid used so far (0 when it is gone).
func cpuSecs(pid int) float64 {
	user, err1 := procField(pid, 11)
	sys, err2 := procField(pid, 12)
	if err1 != nil || err2 != nil {
		return 0
	}
	u, _ := strconv.ParseFloat(user, 64)
	s, _ := strconv.ParseFloat(sys, 64)
	return (u + s) / 100 // clock ticks (USER_HZ)
}

// waitConsumed waits until consumer of stream has every message it was
// given settled (acknowledged or terminated) and none waiting: what a
// test that asserts that nothing more happens waits for, instead of a
// fixed sleep that a busy machine outlasts.
func (s *stack) waitConsumed(t *testing.T, stream, consumer string) {
	t.Helper()
	js := testenv.OperatorJS(t, s.nats.Server().ClientURL())
	state := "no answer yet"
	testenv.WaitFor(t, consumer+" consumed "+stream, testenv.WaitStall, func() string { return s.progress() + ", " + state }, s.dead, func() bool {
		var ci *jetstream.ConsumerInfo
		ci, state = consumerInfo(js, stream, consumer)
		return ci != nil && ci.NumPending == 0 && ci.NumAckPending == 0
	})
}

// consumerInfo is the state of a stream's consumer, and the same in words
// (or what kept it from being read).
func consumerInfo(js jetstream.JetStream, stream, consumer string) (*jetstream.ConsumerInfo, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return nil, err.Error()
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return nil, err.Error()
	}
	return ci, fmt.Sprintf("%d pending, %d in flight, %d pulling", ci.NumPending, ci.NumAckPending, ci.NumWaiting)
}
