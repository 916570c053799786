package main

import (
	"fmt"
	"testing"
)

func TestKeysEditTheCommandLine(t *testing.T) {
	tests := []struct {
		name     string
		keys     string
		wantCmd  string
		wantDone bool
		wantQuit bool
	}{
		{"a command", "fail vm-0\r", "fail vm-0", true, false},
		{"backspace", "fail vm-01\x7f\r", "fail vm-0", true, false},
		{"arrow keys are ignored", "fa\x1b[Ail\r", "fail", true, false},
		{"ESC clears the line", "junk\x1bhelp\r", "help", true, false},
		{"Ctrl-U clears", "junk\x15help\r", "help", true, false},
		{"Ctrl-C quits", "fail\x03", "", false, true},
		{"Ctrl-D on an empty line quits", "\x04", "", false, true},
		{"Ctrl-D with text does not", "x\x04\r", "x", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &screen{}
			var cmd string
			var done, quit bool
			for i := 0; i < len(tt.keys) && !done && !quit; i++ {
				cmd, done, quit = s.key(tt.keys[i])
			}
			if cmd != tt.wantCmd || done != tt.wantDone || quit != tt.wantQuit {
				t.Errorf("got (%q, done %v, quit %v), want (%q, %v, %v)", cmd, done, quit, tt.wantCmd, tt.wantDone, tt.wantQuit)
			}
		})
	}
}

func TestAgentNotesParse(t *testing.T) {
	tests := []struct {
		note string
		want string // pod node notReady ports, or "" when it does not parse
	}{
		{`pod vm-0 on node node-1 is not ready on port "" (HTTP probe on 8080: http-status: HTTP 503 (Service Unavailable))`,
			`vm-0 node-1 true map[:HTTP probe on 8080: http-status: HTTP 503 (Service Unavailable)]`},
		{`pod vm-0 on node node-1 is not ready on port 8080 (HTTP probe on 8080: refused: connection refused)`,
			`vm-0 node-1 true map[:HTTP probe on 8080: refused: connection refused]`},
		{`pod vm-0 on node node-1 is ready on port 8080`, `vm-0 node-1 false map[:]`},
		{`pod app-0 on node node-2 is ready on port "api"`, `app-0 node-2 false map[api:]`},
		{`pod app-0 on node node-2 is ready on ports "api", "grpc"`, `app-0 node-2 false map[api: grpc:]`},
		{`pod app-0 on node node-2 is not ready on ports "api", "grpc" (x: refused); port "web" (timeout)`,
			`app-0 node-2 true map[api:x: refused grpc:x: refused web:timeout]`},
		{`pod app-0 on node node-2 is not ready on port "api" (unbalanced`, ``},
		{`pod app-0 on node node-2 is not ready on port api`, ``},
		{`something else`, ``},
	}
	for _, tt := range tests {
		n, ok := parseAgentNote(tt.note)
		got := ""
		if ok {
			got = fmt.Sprintf("%s %s %t %v", n.pod, n.node, n.notReady, n.ports)
		}
		if got != tt.want {
			t.Errorf("%q: got %s, want %s", tt.note, got, tt.want)
		}
	}
}

func TestPortString(t *testing.T) {
	n := int32(8443)
	tests := []struct {
		name   string
		number *int32
		want   string
	}{
		{"api", &n, "api/8443"},
		{"", &n, "8443"},
		{"api", nil, "api"},
		{"", nil, "(port)"},
	}
	for _, tt := range tests {
		if got := portString(tt.name, tt.number); got != tt.want {
			t.Errorf("portString(%q, %v) = %q, want %q", tt.name, tt.number, got, tt.want)
		}
	}
}
