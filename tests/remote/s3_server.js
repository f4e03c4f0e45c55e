// An S3-compatible server for the tests, on 127.0.0.1: s3rver (an S3
// implementation from npm: buckets, objects, range GETs, listings) behind
// a check of every request's SigV4 signature, recomputed with AWS's own
// signer (@smithy/signature-v4, what the AWS SDK for JavaScript signs
// with).  s3rver itself does not check V4 signatures (its source:
// "Signature version 4 calculation is unimplemented"), and the tests must
// see a wrong key refused as S3 refuses it.
//
// usage: node s3_server.js DIR PORT KEY_ID SECRET
// Prints "listening PORT" once it accepts requests.  Unsigned requests are
// refused (AccessDenied), an unknown key id (InvalidAccessKeyId) and a
// signature that differs (SignatureDoesNotMatch) too, all with 403 and
// S3's XML body.
'use strict';
const http = require('http');
const S3rver = require('s3rver');
const { SignatureV4 } = require('@smithy/signature-v4');
const { Sha256 } = require('@aws-crypto/sha256-js');

const [dir, port, keyId, secret] = process.argv.slice(2);
if (!secret) {
  console.error('usage: node s3_server.js DIR PORT KEY_ID SECRET');
  process.exit(2);
}

function refuse(res, code, message) {
  res.writeHead(403, { 'Content-Type': 'application/xml' });
  res.end('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>' + code + '</Code><Message>' +
          message + '</Message></Error>');
}

// AWS4-HMAC-SHA256 Credential=ID/DATE/REGION/SERVICE/aws4_request,
// SignedHeaders=a;b;c, Signature=HEX
function parseAuth(h) {
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, *SignedHeaders=([^, ]+), *Signature=([0-9a-f]{64})$/.exec(h || '');
  return m && { id: m[1], region: m[3], service: m[4], signed: m[5].split(';'), sig: m[6] };
}

async function verify(req) {
  const a = parseAuth(req.headers.authorization);
  if (!a) return ['AccessDenied', 'Access Denied (the request is not signed with SigV4)'];
  if (a.id !== keyId) return ['InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.'];
  const amzDate = req.headers['x-amz-date'];
  if (!amzDate) return ['AccessDenied', 'no x-amz-date'];
  const date = new Date(amzDate.replace(/^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/, '$1-$2-$3T$4:$5:$6Z'));
  const url = new URL(req.url, 'http://' + req.headers.host);
  const headers = {};
  for (const name of a.signed) {
    const v = req.headers[name];
    if (v === undefined) return ['AccessDenied', 'signed header ' + name + ' is missing'];
    headers[name] = Array.isArray(v) ? v.join(',') : v;
  }
  const query = {};
  for (const [k, v] of url.searchParams) query[k] = v;
  const signer = new SignatureV4({
    credentials: { accessKeyId: keyId, secretAccessKey: secret },
    region: a.region, service: a.service, sha256: Sha256,
    uriEscapePath: false, applyChecksum: false,
  });
  const signed = await signer.sign({
    method: req.method, protocol: 'http:', hostname: url.hostname, port: url.port,
    path: decodeURIComponent(url.pathname), query, headers,
  }, { signingDate: date, unsignableHeaders: new Set(), signableHeaders: new Set(a.signed) });
  const want = /Signature=([0-9a-f]{64})/.exec(signed.headers.authorization)[1];
  if (want !== a.sig) return ['SignatureDoesNotMatch', 'The request signature we calculated does not match the signature you provided. Check your key and signing method.'];
  return null;
}

// s3rver's own account table must know the key too (it then lets the
// request through: the signature was checked above)
require('s3rver/lib/models/account').DUMMY_ACCOUNT.createKeyPair(keyId, secret);
const s3 = new S3rver({ directory: dir, silent: true, allowMismatchedSignatures: true });
const app = s3.callback();
http.createServer((req, res) => {
  verify(req).then((bad) => {
    if (bad) refuse(res, bad[0], bad[1]);
    else app(req, res);
  }, (e) => refuse(res, 'AccessDenied', String(e)));
}).listen(Number(port), '127.0.0.1', function () {
  console.log('listening ' + this.address().port);
});
