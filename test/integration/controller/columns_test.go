package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// TestPrinterColumnsShowEveryPort: kubectl get swh shows every port as
// kubectl get svc does (443/TCP,9000/TCP; port:nodePort/protocol for node
// ports), not the first one only. The table is the API server's own
// rendering of the CRD's printer columns, what kubectl prints.
func TestPrinterColumnsShowEveryPort(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	tests := []struct {
		name  string
		spec  func(*swhv1alpha1.ServiceWithHealthchecksSpec)
		ports *regexp.Regexp
	}{
		{name: "two-ports", spec: func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Ports = []swhv1alpha1.ServicePort{
				{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)},
				{Name: "admin", Port: 9000, TargetPort: intstr.FromInt32(9000), Protocol: corev1.ProtocolUDP},
			}
		}, ports: regexp.MustCompile(`^443/TCP,9000/UDP$`)},
		{name: "node-ports", spec: func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Type = corev1.ServiceTypeNodePort
			s.Ports = []swhv1alpha1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "smtp", Port: 25, TargetPort: intstr.FromInt32(2525)},
			}
		}, ports: regexp.MustCompile(`^80:3[0-9]{4}/TCP,25:3[0-9]{4}/TCP$`)},
	}
	httpClient, err := rest.HTTPClientFor(controlPlane.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			swh := newResource(ns, tt.name)
			tt.spec(&swh.Spec)
			if err := controlPlane.Client.Create(ctx, swh); err != nil {
				t.Fatal(err)
			}
			url := fmt.Sprintf("%s/apis/%s/namespaces/%s/servicewithhealthchecks/%s",
				strings.TrimSuffix(controlPlane.Config.Host, "/"), swhv1alpha1.GroupVersion, ns, tt.name)
			harness.Eventually(t, 20*time.Second, "the Ports column", func() error {
				got, err := tableCell(ctx, httpClient, url, "Ports")
				if err != nil {
					return err
				}
				if !tt.ports.MatchString(got) {
					return fmt.Errorf("Ports column %q, want %s", got, tt.ports)
				}
				return nil
			})
		})
	}
}

// tableCell asks the API server for an object as a Table, as kubectl get
// does, and returns the cell of the named column.
func tableCell(ctx context.Context, c *http.Client, url, column string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(body, table); err != nil {
		return "", fmt.Errorf("decoding the table: %w", err)
	}
	if len(table.Rows) != 1 {
		return "", fmt.Errorf("%d rows, want 1", len(table.Rows))
	}
	for i, def := range table.ColumnDefinitions {
		if def.Name == column {
			cell := table.Rows[0].Cells[i]
			if cell == nil {
				return "", nil
			}
			s, ok := cell.(string)
			if !ok {
				return "", fmt.Errorf("column %s holds %T", column, cell)
			}
			return s, nil
		}
	}
	return "", fmt.Errorf("no column %s among %+v", column, table.ColumnDefinitions)
}
