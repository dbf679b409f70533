/* A recursive-descent JSON parser: enough for scenario files (RFC 8259, no streaming). */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct {
    const char *at;
    const char *start;
    char *error;
    int error_size;
    int failed;
} reader;

static json *fail(reader *r, const char *what) {
    if (!r->failed) {
        snprintf(r->error, (size_t)r->error_size, "%s at byte %ld", what, (long)(r->at - r->start));
        r->failed = 1;
    }
    return NULL;
}

static void skip_space(reader *r) {
    while (*r->at == ' ' || *r->at == '\t' || *r->at == '\n' || *r->at == '\r') r->at++;
}

static json *node(json_type type) {
    json *j = calloc(1, sizeof *j);
    if (j) j->type = type;
    return j;
}

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static char *put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) {
        *out++ = (char)cp;
    } else if (cp < 0x800) {
        *out++ = (char)(0xC0 | (cp >> 6));
        *out++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *out++ = (char)(0xE0 | (cp >> 12));
        *out++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *out++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *out++ = (char)(0xF0 | (cp >> 18));
        *out++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *out++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *out++ = (char)(0x80 | (cp & 0x3F));
    }
    return out;
}

/* A string literal at r->at (on its opening quote); escapes decoded, \u to UTF-8. */
static char *read_string(reader *r) {
    const char *end = ++r->at;
    while (*end && *end != '"') end += (*end == '\\' && end[1]) ? 2 : 1;
    if (!*end) return (char *)fail(r, "unterminated string");
    char *out = malloc((size_t)(end - r->at) * 2 + 1);  /* \uXXXX never grows past 4 bytes */
    char *o = out;
    if (!out) return (char *)fail(r, "out of memory");
    while (r->at < end) {
        char c = *r->at++;
        if ((unsigned char)c < 0x20) { free(out); return (char *)fail(r, "control character in string"); }
        if (c != '\\') { *o++ = c; continue; }
        c = *r->at++;
        switch (c) {
        case '"': case '\\': case '/': *o++ = c; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, low;
            if (!hex4(r->at, &cp)) { free(out); return (char *)fail(r, "bad \\u escape"); }
            r->at += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && r->at[0] == '\\' && r->at[1] == 'u'
                && hex4(r->at + 2, &low) && low >= 0xDC00 && low < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                r->at += 6;
            }
            o = put_utf8(o, cp);
            break;
        }
        default: free(out); return (char *)fail(r, "bad escape");
        }
    }
    *o = '\0';
    r->at = end + 1;
    return out;
}

static json *read_value(reader *r, int depth);

static int append(json *j, char *key, json *item) {
    json **items = realloc(j->items, sizeof *items * (size_t)(j->count + 1));
    if (!items) return 0;
    j->items = items;
    if (j->type == J_OBJECT) {
        char **keys = realloc(j->keys, sizeof *keys * (size_t)(j->count + 1));
        if (!keys) return 0;
        j->keys = keys;
        j->keys[j->count] = key;
    }
    j->items[j->count++] = item;
    return 1;
}

static json *read_container(reader *r, int depth, json_type type, char close) {
    json *j = node(type);
    if (!j) return fail(r, "out of memory");
    r->at++;
    skip_space(r);
    if (*r->at == close) { r->at++; return j; }
    for (;;) {
        char *key = NULL;
        skip_space(r);
        if (type == J_OBJECT) {
            if (*r->at != '"') return fail(r, "expected a key");
            if (!(key = read_string(r))) return NULL;
            skip_space(r);
            if (*r->at++ != ':') return fail(r, "expected ':'");
        }
        json *item = read_value(r, depth + 1);
        if (!item || !append(j, key, item)) return fail(r, "out of memory");
        skip_space(r);
        if (*r->at == ',') { r->at++; continue; }
        if (*r->at == close) { r->at++; return j; }
        return fail(r, type == J_OBJECT ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static json *read_value(reader *r, int depth) {
    if (depth > MAX_DEPTH) return fail(r, "nested too deep");
    skip_space(r);
    char c = *r->at;
    if (c == '{') return read_container(r, depth, J_OBJECT, '}');
    if (c == '[') return read_container(r, depth, J_ARRAY, ']');
    if (c == '"') {
        json *j = node(J_STRING);
        if (!j) return fail(r, "out of memory");
        return (j->string = read_string(r)) ? j : NULL;
    }
    static const struct { const char *word; json_type type; double value; } words[] = {
        {"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0},
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i].word);
        if (strncmp(r->at, words[i].word, n) == 0) {
            json *j = node(words[i].type);
            if (!j) return fail(r, "out of memory");
            j->number = words[i].value;
            r->at += n;
            return j;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char *end;
        double value = strtod(r->at, &end);
        if (end == r->at) return fail(r, "bad number");
        json *j = node(J_NUMBER);
        if (!j) return fail(r, "out of memory");
        j->number = value;
        r->at = end;
        return j;
    }
    return fail(r, c ? "unexpected character" : "unexpected end");
}

json *json_parse(const char *text, char *error, int error_size) {
    reader r = {text, text, error, error_size, 0};
    json *root = read_value(&r, 0);
    if (!root) return NULL;
    skip_space(&r);
    if (*r.at) return fail(&r, "text after the document");
    return root;  /* never freed: a scenario lives as long as the process */
}

const json *json_get(const json *object, const char *key) {
    if (!object || object->type != J_OBJECT) return NULL;
    for (int i = object->count - 1; i >= 0; i--)  /* the last duplicate wins, as in Python */
        if (strcmp(object->keys[i], key) == 0) return object->items[i];
    return NULL;
}

const json *json_at(const json *array, int index) {
    if (!array || array->type != J_ARRAY || index < 0 || index >= array->count) return NULL;
    return array->items[index];
}
