package netnsworker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"net/rpc/jsonrpc"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/networker"
)

// DefaultTimeout bounds one request. An Apply waits for IPv6 DAD (up to
// 3 s an address) in the worker; the NRI request around it has its own,
// shorter, deadline in the runtime.
const DefaultTimeout = 30 * time.Second

// Client is networker.NamespaceOps through the worker's socket. It keeps
// one connection, made at the first request and again after one broke.
type Client struct {
	Socket string
	// Timeout bounds each request; 0: DefaultTimeout.
	Timeout time.Duration
	// Log, when set, hears that Ready waits.
	Log logrus.FieldLogger

	mu   sync.Mutex
	conn *rpc.Client
}

var _ networker.NamespaceOps = (*Client)(nil)

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

// dialPatience is how long a dial waits for a worker that is not
// listening yet (its container starts beside the agent's, or restarts).
const dialPatience = time.Second

// dial connects to socket, waiting up to dialPatience for a worker not
// there yet.
func dial(socket string, timeout time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(dialPatience)
	for {
		conn, err := net.DialTimeout("unix", socket, timeout)
		if err == nil || !(errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) || time.Now().After(deadline) {
			return conn, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readyPoll is how long Ready waits between dials (each already waits
// dialPatience for a worker not listening yet).
const readyPoll = 200 * time.Millisecond

// Ready waits until the worker accepts a connection, which it keeps for
// the first request, or until ctx ends. It says once, at a second's wait,
// what it waits for.
func (c *Client) Ready(ctx context.Context) error {
	start, told := time.Now(), false
	for {
		c.mu.Lock()
		if c.conn == nil {
			if conn, err := dial(c.Socket, readyPoll); err == nil {
				c.conn = jsonrpc.NewClient(conn)
			}
		}
		up := c.conn != nil
		c.mu.Unlock()
		if up {
			return nil
		}
		if !told && time.Since(start) > time.Second && c.Log != nil {
			c.Log.Infof("waiting for the pod-network worker at %s", c.Socket)
			told = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod-network worker at %s: %w", c.Socket, ctx.Err())
		case <-time.After(readyPoll):
		}
	}
}

// errTransport marks a request whose answer did not come back.
type errTransport struct{ err error }

func (e errTransport) Error() string { return e.err.Error() }
func (e errTransport) Unwrap() error { return e.err }

// call sends one request and waits for its answer. An error the worker
// answered is returned as it said it; any other drops the connection.
// A request that was never sent (a connection found closed) is sent
// again on a new one; whether another reached the worker is not known.
func (c *Client) call(method string, args, reply any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	for attempt := 0; ; attempt++ {
		if c.conn == nil {
			conn, err := dial(c.Socket, timeout)
			if err != nil {
				return fmt.Errorf("pod-network worker at %s: %w", c.Socket, err)
			}
			c.conn = jsonrpc.NewClient(conn)
		}
		done := c.conn.Go(serviceName+"."+method, args, reply, make(chan *rpc.Call, 1)).Done
		var err error
		select {
		case call := <-done:
			err = call.Error
		case <-time.After(timeout):
			err = fmt.Errorf("no answer within %v", timeout)
		}
		var answered rpc.ServerError
		if err == nil || errors.As(err, &answered) {
			if err != nil {
				return errors.New(string(answered))
			}
			return nil
		}
		c.conn.Close()
		c.conn = nil
		if errors.Is(err, rpc.ErrShutdown) && attempt == 0 {
			continue // found closed: not sent
		}
		return errTransport{fmt.Errorf("pod-network worker at %s: %s: %w", c.Socket, method, err)}
	}
}

// retry sends an idempotent request, once more on a new connection when
// its answer was lost.
func (c *Client) retry(method string, args, reply any) error {
	err := c.call(method, args, reply)
	if errors.As(err, new(errTransport)) {
		err = c.call(method, args, reply)
	}
	return err
}

func (c *Client) PodLinkNames(netnsPath string) (map[string]bool, error) {
	var reply LinkNames
	err := c.retry("PodLinkNames", &PodArgs{NetNS: netnsPath}, &reply)
	return reply.Names, err
}

func (c *Client) Plan(netnsPath string, plans []podnetwork.Attachment) ([]attach.Record, error) {
	var reply Records
	err := c.retry("Plan", &PlanArgs{PodArgs: PodArgs{NetNS: netnsPath}, Attachments: plans}, &reply)
	return reply.Records, err
}

// Apply is not sent twice: an answer lost is networker.ErrOutcomeUnknown,
// and the networker gives the records back.
func (c *Client) Apply(id, netnsPath string, records []attach.Record) ([]attach.Record, error) {
	var reply Records
	err := c.call("Apply", &RecordsArgs{PodArgs: PodArgs{Sandbox: id, NetNS: netnsPath}, Records: records}, &reply)
	if errors.As(err, new(errTransport)) {
		return nil, fmt.Errorf("%w: %w", networker.ErrOutcomeUnknown, err)
	}
	return reply.Records, err
}

func (c *Client) Release(id, netnsPath string, records []attach.Record) ([]attach.Record, error) {
	var reply Released
	if err := c.retry("Release", &RecordsArgs{PodArgs: PodArgs{Sandbox: id, NetNS: netnsPath}, Records: records}, &reply); err != nil {
		return records, err
	}
	if reply.Error != "" {
		return reply.Left, errors.New(reply.Error)
	}
	return reply.Left, nil
}

func (c *Client) Gone(id, netnsPath string) (bool, error) {
	var reply GoneReply
	err := c.retry("Gone", &PodArgs{Sandbox: id, NetNS: netnsPath}, &reply)
	return reply.Gone, err
}

// Ping asks the worker to answer (within the client's Timeout).
func (c *Client) Ping() error {
	return c.call("Ping", &Empty{}, &Empty{})
}

// SocketFlagHelp is the agents' --pod-network-worker-socket's help.
const SocketFlagHelp = "with pod networking, have rdma-cdi-agent pod-network-worker at this unix socket do the netlink work in the node's and the pods' network namespaces, so that this process needs no capability (the chart's pod-network container); empty: this process does it, with CAP_NET_ADMIN, CAP_NET_RAW and CAP_SYS_ADMIN"

// ForSocket is the networker's Namespaces for socket: a client of the
// worker there, or nil (the work done in this process) when socket is "".
func ForSocket(socket string, log logrus.FieldLogger) networker.NamespaceOps {
	if socket == "" {
		return nil
	}
	return &Client{Socket: socket, Log: log}
}
