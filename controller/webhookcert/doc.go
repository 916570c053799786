// Package webhookcert keeps the eviction guard's serving certificate
// without Helm or cert-manager: a CA and a serving certificate in one
// Secret, the CA in the caBundle of the ValidatingWebhookConfiguration,
// both rotated before they expire, and the certificate served straight from
// the Secret (no mounted file to wait for).
//
// Every controller replica runs a Rotator, leader or not, since every
// replica serves the webhook. Each pass:
//
//  1. reads the Secret and the webhook configuration from the API server;
//  2. decides what the Secret must hold (plan, a pure function): a new CA
//     when there is none or two thirds of its life have passed, kept beside
//     the previous one in the bundle; a new serving certificate when there
//     is none, it is not valid for the hosts, two thirds of its life have
//     passed, or a newer CA has been trusted by the API server long enough
//     (Settle); the previous CA dropped once every replica serves a
//     certificate of the new one;
//  3. writes the Secret (under its resourceVersion: replicas that decide at
//     once conflict, read again and agree), then the bundle into every
//     webhook of the configuration;
//  4. serves the Secret's certificate.
//
// So the API server always trusts the certificate every replica serves: a
// rotation changes the bundle before any replica serves a certificate of
// the new CA, and drops the old CA only after.
package webhookcert
