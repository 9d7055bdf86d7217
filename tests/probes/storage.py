# tempfile in TMPDIR and an sqlite3 database in the working directory.
import json, os, sqlite3, tempfile

with tempfile.NamedTemporaryFile("w+", delete=False) as f:
    f.write("scratch")
    tmp_name = f.name
tmp_text = open(tmp_name).read()

db = sqlite3.connect("data.db")
db.execute("create table t (id integer primary key, name text)")
db.executemany("insert into t (name) values (?)", [("a",), ("b",), ("c",)])
db.commit()
rows = db.execute("select id, name from t order by id").fetchall()
db.close()
print(json.dumps({"tmp_dir": os.path.dirname(tmp_name), "tmp_text": tmp_text,
                  "db": os.path.abspath("data.db"), "rows": rows,
                  "gettempdir": tempfile.gettempdir()}))
