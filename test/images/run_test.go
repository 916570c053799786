package images_test

import (
	"archive/tar"
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swh-dev/swh/test/harness/process"
	"github.com/swh-dev/swh/test/images"
)

// extract writes the image's binary to a temporary executable.
func extract(t *testing.T, r images.Result, name string) string {
	t.Helper()
	img, _ := read(t, r)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no %s in %s: %v", name, r.Name, err)
		}
		if h.Name != name {
			continue
		}
		path := filepath.Join(t.TempDir(), name)
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
}

// started is a binary whose stderr lines arrive on a channel.
type started struct {
	*process.Proc
	lines chan string
}

func start(t *testing.T, bin string, env []string, args ...string) *started {
	t.Helper()
	// Its output through a pipe the program holds itself: the scan ends
	// when it exits.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := process.Start(process.Spec{Name: filepath.Base(bin), Path: bin, Args: args, Env: env, Output: w})
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		t.Fatal(err)
	}
	p := &started{Proc: proc, lines: make(chan string, 64)}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		defer func() { _ = r.Close() }()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			t.Logf("%s: %s", filepath.Base(bin), sc.Text())
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		proc.Kill()
		<-scanned
	})
	return p
}

// addresses waits for n "swh-workload: pod P KIND ADDR" lines.
func (p *started) addresses(t *testing.T, n int) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	timeout := time.After(30 * time.Second)
	for got := 0; got < n; {
		select {
		case line := <-p.lines:
			f := strings.Fields(line)
			if len(f) == 5 && f[0] == "swh-workload:" && f[1] == "pod" {
				out[f[3]] = append(out[f[3]], f[4])
				got++
			}
		case <-p.Exited():
			t.Fatalf("exited before listening: %v", p.Err())
		case <-timeout:
			t.Fatalf("listening on %d of %d addresses after 30s", len(out), n)
		}
	}
	return out
}

// get sends one request without keep-alive; it returns status and body.
func get(method, url string) (int, string, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// testWorkload runs the workload binary of the image on loopback.
func testWorkload(t *testing.T, r images.Result) {
	bin := extract(t, r, "swh")
	failFile := filepath.Join(t.TempDir(), "fail")
	p := start(t, bin, []string{"POD_NAME=web-0"},
		"-http", "127.0.0.1:0,127.0.0.1:0", "-tcp", "127.0.0.1:0",
		"-fail-file", failFile, "-shutdown-delay", "2s")
	addrs := p.addresses(t, 3)
	web1, web2 := "http://"+addrs["http"][0], "http://"+addrs["http"][1]
	port2 := addrs["http"][1][strings.LastIndex(addrs["http"][1], ":")+1:]

	expect := func(method, url string, wantStatus int, wantBody string) {
		t.Helper()
		status, body, err := get(method, url)
		if err != nil || status != wantStatus || body != wantBody {
			t.Errorf("%s %s: %d %q (%v), want %d %q", method, url, status, body, err, wantStatus, wantBody)
		}
	}
	ctl := func(args ...string) {
		t.Helper()
		args = append([]string{args[0], "-fail-file", failFile}, args[1:]...)
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("swh-workload %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	expect("GET", web1+"/", 200, "web-0\n")
	expect("GET", web2+"/healthz", 200, "ok\n")
	// The exec hook (no shell in the image) fails one port, then all.
	ctl("fail", port2)
	expect("GET", web2+"/healthz", 503, "failing\n")
	expect("GET", web2+"/", 503, "web-0 failing\n")
	expect("GET", web1+"/healthz", 200, "ok\n")
	ctl("recover", port2)
	expect("GET", web2+"/healthz", 200, "ok\n")
	ctl("fail")
	expect("GET", web1+"/healthz", 503, "failing\n")
	expect("GET", web2+"/healthz", 503, "failing\n")
	ctl("recover")
	expect("GET", web1+"/healthz", 200, "ok\n")
	// The endpoint switches its own port only.
	expect("POST", web1+"/fail", 200, "web-0 failing\n")
	expect("GET", web1+"/healthz", 503, "failing\n")
	expect("GET", web2+"/healthz", 200, "ok\n")
	expect("POST", web1+"/recover", 200, "web-0 recovered\n")
	expect("GET", web1+"/healthz", 200, "ok\n")

	banner := func() (string, error) {
		c, err := net.DialTimeout("tcp", addrs["tcp"][0], 5*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		return bufio.NewReader(c).ReadString('\n')
	}
	if line, err := banner(); err != nil || line != "220 web-0\n" {
		t.Errorf("TCP banner %q (%v), want %q", line, err, "220 web-0\n")
	}

	// SIGTERM: it keeps answering through the shutdown delay, then exits 0.
	sent := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	expect("GET", web1+"/", 200, "web-0\n")
	if line, err := banner(); err != nil || line != "220 web-0\n" {
		t.Errorf("TCP banner while terminating %q (%v), want %q", line, err, "220 web-0\n")
	}
	select {
	case <-p.Exited():
		if err := p.Err(); err != nil {
			t.Errorf("exit after SIGTERM: %v, want status 0", err)
		}
		if took := time.Since(sent); took < 2*time.Second {
			t.Errorf("exited %s after SIGTERM, before the 2s shutdown delay", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15s after SIGTERM")
	}
	if _, _, err := get("GET", web1+"/"); err == nil {
		t.Errorf("GET %s answered after the exit", web1)
	}

	// The preStop hook's sleep.
	began := time.Now()
	if out, err := exec.Command(bin, "sleep", "300ms").CombinedOutput(); err != nil || time.Since(began) < 300*time.Millisecond {
		t.Errorf("swh-workload sleep 300ms: %v after %s\n%s", err, time.Since(began), out)
	}
}

// testPause runs the pause binary: it stays up until SIGTERM, then exits 0.
func testPause(t *testing.T, r images.Result) {
	bin := extract(t, r, "pause")
	p := start(t, bin, nil)
	select {
	case <-p.Exited():
		t.Fatalf("pause exited on its own: %v", p.Err())
	case <-time.After(300 * time.Millisecond):
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
		if err := p.Err(); err != nil {
			t.Errorf("pause after SIGTERM: %v, want status 0", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pause still running 5s after SIGTERM")
	}
}
