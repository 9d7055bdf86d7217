# A little of everything pure-Python: json, re, math, decimal, hashlib, stdin, argv.
import decimal, hashlib, json, math, re, sys

numbers = [int(x) for x in sys.stdin.read().split()]
decimal.getcontext().prec = 30
print(json.dumps({
    "argv": sys.argv,
    "stdin_sum": sum(numbers),
    "stdin_count": len(numbers),
    "re": re.findall(r"\d+", "a1b22c333"),
    "math": [math.isqrt(10**12), math.comb(10, 3), math.gcd(84, 36)],
    "decimal": str(decimal.Decimal(1) / decimal.Decimal(7)),
    "sha256": hashlib.sha256(b"vivarium").hexdigest(),
    "json": json.loads('{"k": [1, 2.5, null]}'),
}))
