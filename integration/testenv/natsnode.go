package testenv

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Start starts the node's process (again, on its data).
func (p *NATSProc) Start() {
	p.t.Helper()
	cmd := exec.Command(p.bin, "-c", filepath.Join(p.dir, "nats.conf"))
	cmd.Env = append(os.Environ(), "NATS_INGEST_PASSWORD="+NATSPassword("ingest-api"), "NATS_MAPPER_PASSWORD="+NATSPassword("mapper-worker"),
		"NATS_WRITER_PASSWORD="+NATSPassword("writer-worker"), "NATS_OPERATOR_PASSWORD="+NATSPassword("operator"))
	log, err := os.OpenFile(filepath.Join(p.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	// A node outlives no test run, paused or not.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.uid)}
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmd, p.exited, p.stopped = cmd, make(chan struct{}), false
	go func() { _ = cmd.Wait(); log.Close(); close(p.exited) }()
}

// waitListening waits until the node takes connections.
func (p *NATSProc) waitListening() {
	p.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
			p.t.Fatalf("nats node %s exited: %s", p.name, b)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("nats node %s not listening: %v", p.name, err)
		}
	}
}

// Name is the node's server name (as stream info names leaders).
func (p *NATSProc) Name() string { return p.name }

// ClientURL is the node's client address.
func (p *NATSProc) ClientURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

// LinkedURL is the address programs are given: the node's link when the
// cluster has links, else its client address.
func (p *NATSProc) LinkedURL() string {
	if p.clientLink != nil {
		return "nats://" + p.clientLink.Addr()
	}
	return p.ClientURL()
}

// Links are the links in front of the node's client and cluster ports
// (none without ProcCluster.Links).
func (p *NATSProc) Links() []*Link {
	if p.clientLink == nil {
		return nil
	}
	return []*Link{p.clientLink, p.routeLink}
}

// Clients names the client connections the node holds now, by the names
// the programs gave them (nil: the node did not answer within a second).
func (p *NATSProc) Clients() []string {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?limit=1024", p.monitor))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var connz struct {
		Connections []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&connz) != nil {
		return nil
	}
	names := []string{}
	for _, c := range connz.Connections {
		names = append(names, c.Name)
	}
	return names
}

// Pause stops the process where it is (SIGSTOP): its sockets stay open and
// nothing answers, as in a long stall.
func (p *NATSProc) Pause() { p.signal(syscall.SIGSTOP) }

// Resume lets a paused process go on (SIGCONT).
func (p *NATSProc) Resume() { p.signal(syscall.SIGCONT) }

func (p *NATSProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("nats node %s: %v", p.name, err)
	}
}

// Stop ends the process (resumed first, then SIGTERM; SIGKILL after 10 s).
func (p *NATSProc) Stop() {
	if p.cmd == nil || p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// waitReplicated waits until an n-replica stream can be created through
// url: a meta leader alone is not enough, the first requests after the
