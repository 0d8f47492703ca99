package hookevents

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// BenchmarkSend is what a hook adds to a container start to report its
// outcome, with an agent listening (and draining), and with none: one
// socket, one sendto, one close.
//
//	go test ./pkg/hookevents -run '^$' -bench BenchmarkSend
func BenchmarkSend(b *testing.B) {
	o := Outcome{Hook: "create-runtime", ContainerID: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Pid: 4242, StartTime: 123456,
		Namespace: "ml", Pod: "trainer-0", Container: "main", Devices: []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"}, UserSpace: UserSpaceImage}
	b.Run("agent", func(b *testing.B) {
		if os.Getuid() != 0 {
			b.Skip("the listener takes root's datagrams only")
		}
		sock := filepath.Join(b.TempDir(), "events.sock")
		l, err := Listen(sock)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = l.Receive(ctx, func(Outcome) {}, func(error) {}) }()
		dropped := 0
		for b.Loop() {
			// In this tight loop the queue fills (EAGAIN): dropped, as a
			// hook would, never waited for.
			if err := Send(sock, o); errors.Is(err, syscall.EAGAIN) {
				dropped++
			} else if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(dropped)/float64(b.N), "dropped/op")
	})
	b.Run("no-agent", func(b *testing.B) {
		sock := filepath.Join(b.TempDir(), "none.sock")
		for b.Loop() {
			_ = Send(sock, o)
		}
	})
}
