package envoyconfig

import (
	"encoding/json"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Envoy's own 504 (a route timeout passed) reaches clients as the Status
// kube-apiserver's timeout filter sends, and no other local reply is
// rewritten: the plugin's own answers (401, 403, 503, merged discovery) keep
// their bodies.
func TestEnvoysTimeoutAnswerIsKubeAPIServersTimeoutStatus(t *testing.T) {
	status := apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0).ErrStatus
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	want, err := json.Marshal(status)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range renderShippedFiles(t)[:2] {
		t.Run(f.name, func(t *testing.T) {
			mappers := httpConnectionManagerOf(t, decodeBootstrapForTest(t, f.content)).GetLocalReplyConfig().GetMappers()
			if len(mappers) != 1 {
				t.Fatalf("%d local reply mappers; want exactly the timeout's", len(mappers))
			}
			m := mappers[0]
			cmp := m.GetFilter().GetStatusCodeFilter().GetComparison()
			if cmp.GetOp().String() != "EQ" || cmp.GetValue().GetDefaultValue() != 504 {
				t.Errorf("mapper applies to %s %d; want EQ 504 only", cmp.GetOp(), cmp.GetValue().GetDefaultValue())
			}
			if got := m.GetBody().GetInlineString(); got != string(want) {
				t.Errorf("body %s\nwant %s", got, want)
			}
			format := m.GetBodyFormatOverride()
			if format.GetContentType() != "application/json" || format.GetTextFormatSource().GetInlineString() != "%LOCAL_REPLY_BODY%" {
				t.Errorf("body format %v; want the mapped body as application/json", format)
			}
		})
	}
}
