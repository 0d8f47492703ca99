package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
)

// DockerRunSpec is a container run through the Docker Engine API (RunAPI),
// for what the 20.10 client cannot say, such as CDI devices on Docker 29.
type DockerRunSpec struct {
	Image      string
	Cmd        []string
	Env        []string
	CDIDevices []string // fully qualified CDI names, VENDOR/CLASS=NAME
	Runtime    string   // "" for the daemon's default
	Privileged bool
	CapAdd     []string
}

// RunAPI creates, starts and waits for a container through the Engine API on
// d.Socket, then removes it. It returns the container's stdout, stderr and
// exit code; err is for API failures only (a non-zero exit is not an error).
func (d *DockerEnv) RunAPI(spec DockerRunSpec) (stdout, stderr string, exitCode int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
		},
	}}
	call := func(method, path string, in, out any) error {
		var body io.Reader
		if in != nil {
			b, err := json.Marshal(in)
			if err != nil {
				return err
			}
			body = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://docker"+path, body)
		if err != nil {
			return err
		}
		if in != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
		}
		if out == nil {
			return nil
		}
		if raw, ok := out.(*[]byte); ok {
			*raw = data
			return nil
		}
		return json.Unmarshal(data, out)
	}

	type deviceRequest struct {
		Driver    string
		DeviceIDs []string
	}
	hostConfig := map[string]any{"NetworkMode": "none", "Privileged": spec.Privileged}
	if spec.Runtime != "" {
		hostConfig["Runtime"] = spec.Runtime
	}
	if len(spec.CapAdd) > 0 {
		hostConfig["CapAdd"] = spec.CapAdd
	}
	if len(spec.CDIDevices) > 0 {
		hostConfig["DeviceRequests"] = []deviceRequest{{Driver: "cdi", DeviceIDs: spec.CDIDevices}}
	}
	create := map[string]any{"Image": spec.Image, "Cmd": spec.Cmd, "Env": spec.Env, "HostConfig": hostConfig}
	var created struct{ Id string }
	name := UniqueID("e2e-")
	if err := call("POST", "/containers/create?name="+url.QueryEscape(name), create, &created); err != nil {
		return "", "", -1, err
	}
	defer func() { _ = call("DELETE", "/containers/"+created.Id+"?force=1", nil, nil) }()
	if err := call("POST", "/containers/"+created.Id+"/start", nil, nil); err != nil {
		return "", "", -1, err
	}
	var waited struct{ StatusCode int }
	if err := call("POST", "/containers/"+created.Id+"/wait", nil, &waited); err != nil {
		return "", "", -1, err
	}
	var logs []byte
	if err := call("GET", "/containers/"+created.Id+"/logs?stdout=1&stderr=1", nil, &logs); err != nil {
		return "", "", -1, err
	}
	so, se := demuxLogs(logs)
	return so, se, waited.StatusCode, nil
}

// demuxLogs splits a non-TTY log stream: frames of an 8-byte header (stream
// 1 = stdout, 2 = stderr; big-endian size in bytes 4..7) and the payload.
func demuxLogs(b []byte) (stdout, stderr string) {
	var so, se bytes.Buffer
	for len(b) >= 8 {
		n := int(binary.BigEndian.Uint32(b[4:8]))
		if len(b) < 8+n {
			n = len(b) - 8
		}
		if b[0] == 2 {
			se.Write(b[8 : 8+n])
		} else {
			so.Write(b[8 : 8+n])
		}
		b = b[8+n:]
	}
	return so.String(), se.String()
}
