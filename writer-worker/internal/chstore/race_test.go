package chstore

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Inserts whose context is cancelled the moment they return, while the
// scheduler is busy, must not break the next insert on the same connection.
func TestCancelAfterInsertKeepsConnectionsUsable(t *testing.T) {
	s := openTest(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	stop := make(chan struct{})
	var spin sync.WaitGroup
	for range 8 {
		spin.Add(1)
		go func() {
			defer spin.Done()
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	defer func() { close(stop); spin.Wait() }()
	var failed atomic.Int32
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := s.InsertValues(ctx, []ValueRow{{Entity: "e", Input: "i", TsNs: int64(i), Serial: "s", DeviceInput: "d",
					EventID: fmt.Sprint(w, "-", i), JSON: json.RawMessage(`1`)}})
				cancel()
				if err != nil {
					failed.Add(1)
					t.Log(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of 450 inserts failed", n)
	}
}
