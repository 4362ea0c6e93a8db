package main

import (
	"slices"
	"testing"
)

func TestIdentityFromSubjectMapsLikeTheX509Authenticator(t *testing.T) {
	cases := []struct {
		subject string
		user    string
		groups  []string
		wantErr bool
	}{
		{subject: "CN=alice", user: "alice"},
		{subject: "CN=alice,O=dev,O=system:masters", user: "alice", groups: []string{"system:masters", "dev"}},
		{subject: `CN=smith\, john,OU=ops,O=acme\+co`, user: "smith, john", groups: []string{"acme+co"}},
		{subject: `CN=j\C3\BCrgen,O=t\C3\A9am`, user: "jürgen", groups: []string{"téam"}},
		{subject: "CN=node+UID=7,O=system:nodes", user: "node", groups: []string{"system:nodes"}},
		{subject: "CN=newest,CN=oldest", user: "newest"},
		{subject: "O=no-common-name", wantErr: true},
		{subject: "CN=", wantErr: true},
		{subject: `CN=a\`, wantErr: true},
		{subject: "garbage", wantErr: true},
		{subject: `CN=evil\0Aline`, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.subject, func(t *testing.T) {
			id, err := identityFromSubject(c.subject)
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v; want error %v", err, c.wantErr)
			}
			if err == nil && (id.User != c.user || !slices.Equal(id.Groups, c.groups)) {
				t.Errorf("got %+v; want user %q groups %q", id, c.user, c.groups)
			}
		})
	}
}

func FuzzIdentityFromSubject(f *testing.F) {
	for _, s := range []string{"CN=alice,O=dev", `CN=a\2C b`, `CN=\`, "O=x+CN=y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		id, err := identityFromSubject(subject)
		if err != nil {
			return
		}
		if id.User == "" {
			t.Fatal("accepted a subject without a user")
		}
	})
}
